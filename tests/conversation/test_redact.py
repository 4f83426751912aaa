"""The redactor's substring hints skip a regex pass only where it could not match."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation.redact import BUILTIN_PATTERNS, HINTS, Redactor
from tests.strategies import joined

SECRETS = [
    "sk-" + "a" * 30,
    "sk-proj-" + "Z9_" * 10,
    "AKIA" + "B" * 16,
    "ASIA" + "7" * 16,
    "ghp_" + "c" * 36,
    "github_pat_" + "d" * 30,
    "xoxb-" + "1" * 12,
    "AIza" + "e" * 35,
    "Bearer " + "f" * 24,
    "BEARER " + "g." * 12,
    "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----",
    "jane.doe+x@mail.example.org",
]
PIECES = [*SECRETS, " ", "\n", "sk-", "AKI", "gh", "@", "earer", "x", "é", "-----", "PRIVATE KEY"]
TEXTS = st.one_of(st.text(max_size=300), joined(PIECES, 40))


def reference(patterns: dict[str, str], text: str) -> tuple[str, dict[str, int]]:
    """Every pattern applied in order, no hints."""
    counts: dict[str, int] = {}
    for name, rx in patterns.items():
        text, n = re.subn(rx, lambda _m, name=name: f"[REDACTED:{name}]", text)
        if n:
            counts[name] = n
    return text, counts


def test_every_builtin_pattern_has_hints() -> None:
    assert set(HINTS) == set(BUILTIN_PATTERNS)


@settings(max_examples=300, deadline=None)
@given(text=TEXTS)
def test_hints_change_nothing(text: str) -> None:
    assert Redactor(BUILTIN_PATTERNS).redact(text) == reference(BUILTIN_PATTERNS, text)


def test_each_secret_is_redacted_and_hinted() -> None:
    red = Redactor(BUILTIN_PATTERNS)
    for secret in SECRETS:
        out, counts = red.redact(f"before {secret} after")
        assert secret not in out and sum(counts.values()) == 1, secret


def test_a_pattern_with_a_builtin_name_but_another_regex_always_runs() -> None:
    # the hints belong to the built-in regex, not to its name
    red = Redactor({"email": r"\bsecret\d+\b"})
    assert red.redact("the secret42 is here") == ("the [REDACTED:email] is here", {"email": 1})


def test_user_patterns_run_without_hints() -> None:
    red = Redactor({"ticket": r"TCK-\d+"})
    assert red.hints == [()]
    assert red.redact("see TCK-12")[0] == "see [REDACTED:ticket]"


@settings(max_examples=300, deadline=None)
@given(text=TEXTS)
def test_the_default_redactor_changes_nothing_either(text: str) -> None:
    from ctxpolicy.conversation.redact import DEFAULT_KEYS, default_redactor

    keys = {k: BUILTIN_PATTERNS[k] for k in DEFAULT_KEYS}
    assert default_redactor().redact(text) == reference(keys, text)


def test_hints_are_grouped_behind_a_shared_gate() -> None:
    from ctxpolicy.conversation.redact import _gates, _groups, _sign

    assert _groups(HINTS["github_token"]) == (
        ("gh", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
        ("github_pat_", ("github_pat_",)),
    )
    assert _groups(HINTS["aws_access_key"]) == (("IA", ("AKIA", "ASIA")),)
    assert _groups(("sk-",)) == (("sk-", ("sk-",)),)
    assert _groups(()) == ()
    (gate, members), (alone, none) = _gates(HINTS["github_token"])
    assert gate == "gh" and members is not None and members.pattern == "ghp_|gho_|ghu_|ghs_|ghr_"
    assert alone == "github_pat_" and none is None
    assert (_sign(HINTS["openai_key"]), _sign(HINTS["github_token"])) == ("-", "_")
    assert _sign(HINTS["aws_access_key"]) == "I"  # no punctuation: the rarer capital
    assert _sign(HINTS["private_key"]) == "-"  # not the space
    assert _sign(HINTS["bearer_token"]) == _sign(HINTS["slack_token"]) == _sign(()) == ""
    for hints in HINTS.values():
        groups = _groups(hints)
        assert sorted(m for _, ms in groups for m in ms) == sorted(hints)  # each hint once
        assert all(gate in m for gate, ms in groups for m in ms)
        assert all(_sign(hints) in h for h in hints)


@settings(max_examples=300, deadline=None)
@given(
    hints=st.lists(st.text(alphabet="abAIB_-.*| ", min_size=1, max_size=5), max_size=6).map(tuple),
    text=st.text(alphabet="abAIB_-.*| ", max_size=40),
)
def test_gates_find_a_hint_exactly_when_one_is_there(hints: tuple[str, ...], text: str) -> None:
    from ctxpolicy.conversation.redact import _gates, _holds_one, _sign

    hints = tuple(dict.fromkeys(hints))
    assert _holds_one(text, _gates(hints)) == any(h in text for h in hints)
    if _sign(hints) not in text:
        assert not any(h in text for h in hints)
