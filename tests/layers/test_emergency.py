import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import Unit, check_units
from ctxpolicy.engine import overflow
from ctxpolicy.engine.overflow import (
    is_context_overflow,
    parse_limit,
    register_overflow_pattern,
    unregister_overflow_pattern,
)
from ctxpolicy.layers.emergency import Emergency, EmergencyOptions
from tests.helpers_conv import Conv, approx_count, make_ctx


def conv(n=5):
    c = Conv().system("sys").user("task")
    for k in range(n):
        c.step(("bash", {"cmd": f"ls {k}"}, f"out{k}"))
    return c.user("continue")


def test_keeps_system_pinned_ledger_summary_and_last_rounds():
    units = conv().units()
    summary = Unit.summary("earlier", [units[2]])
    ledger = Unit(
        kind="ledger", messages=({"role": "user", "content": "ledger"},), key="ledger", pinned=True
    )
    units = [units[0], units[1], ledger, summary, *units[3:]]
    res = Emergency(EmergencyOptions()).apply(make_ctx(units, target=0), units)
    assert [(u.kind, u.round) for u in res.units] == [
        ("system", None),
        ("user", None),
        ("ledger", None),
        ("summary", None),
        ("step", 3),
        ("step", 4),
        ("user", None),
    ]
    assert [u.round for u in res.dropped] == [1, 2]
    assert check_units(units, res.units) == []
    res0 = Emergency(EmergencyOptions(keep_recent_rounds=0, keep_summary=False)).apply(
        make_ctx(units), units
    )
    assert [u.kind for u in res0.units] == ["system", "user", "ledger", "user"]


def test_keeps_fewer_rounds_while_above_the_target():
    c = Conv().system("sys").user("task")
    for k in range(5):
        c.step(("bash", {"cmd": f"ls {k}"}, f"out{k} " * 200))
    units = c.units()
    everything = approx_count(units)
    kept_2 = Emergency(EmergencyOptions()).apply(make_ctx(units, target=everything), units)
    assert [u.round for u in kept_2.units if u.kind == "step"] == [3, 4]
    assert kept_2.report["kept_rounds"] == 2
    # the target cannot be met with two rounds: by default two are kept all the same
    tight = approx_count(kept_2.units) - 50
    res = Emergency(EmergencyOptions()).apply(make_ctx(units, target=tight), units)
    assert res.units == kept_2.units
    # with min_recent_rounds one round fewer, down to it
    res = Emergency(EmergencyOptions(min_recent_rounds=1)).apply(
        make_ctx(units, target=tight), units
    )
    assert [u.round for u in res.units if u.kind == "step"] == [4]
    assert [u.round for u in res.dropped] == [0, 1, 2, 3]
    assert res.report["kept_rounds"] == 1
    assert check_units(units, res.units) == []
    # min_recent_rounds bounds it; 0 may drop the newest round too
    res0 = Emergency(EmergencyOptions(min_recent_rounds=0)).apply(make_ctx(units, target=0), units)
    assert [u.kind for u in res0.units] == ["system", "user"]
    res2 = Emergency(EmergencyOptions(min_recent_rounds=3)).apply(make_ctx(units, target=0), units)
    assert [u.round for u in res2.units if u.kind == "step"] == [3, 4]


def test_truncates_huge_result_in_kept_round():
    c = Conv().system("sys").user("task").step(("read_file", {}, "a" * 9000)).user("continue")
    units = c.units()
    res = Emergency(EmergencyOptions(max_result_chars=30)).apply(make_ctx(units, target=50), units)
    assert (
        res.units[2].messages[1]["content"] == "a" * 20 + "\n[… 8970 chars elided …]\n" + "a" * 10
    )
    assert res.report["truncated_results"] == 1
    assert approx_count(res.units) < approx_count(units)


OVERFLOWS = [
    (
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens. Please reduce the length of the messages.",
        8192,
    ),
    ("prompt is too long: 210000 tokens > 200000 maximum", 200000),
    (
        "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again",
        200000,
    ),
    (
        "The prompt (total length 5000) is too long to fit into the model (context length 4096). Make sure that `max_model_len` is no smaller than the number of text tokens.",
        4096,
    ),
    ("Input prompt (5000 tokens) is too long and exceeds limit of 4096", 4096),
    ("The input (5000 tokens) is longer than the model's context length (4096 tokens).", 4096),
    ("Requested token count exceeds the model's maximum context length of 32,768 tokens", 32768),
    (
        "The input token count (1234567) exceeds the maximum number of tokens allowed (1048576).",
        1048576,
    ),
    (
        "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length",
        32768,
    ),
    ("the request exceeds the available context size, try increasing it", None),
    (
        "litellm.ContextWindowExceededError: ContextWindowExceededError: OpenAIException - too long",
        None,
    ),
    ("Error code: context_too_long", None),
    ("input length exceeds the context length", None),
    ('{"error": {"code": "context_length_exceeded", "message": "too many"}}', None),
]


@pytest.mark.parametrize(("text", "limit"), OVERFLOWS)
def test_overflow_strings(text, limit):
    assert is_context_overflow(text)
    assert parse_limit(text) == limit


@pytest.mark.parametrize(
    "text",
    [
        "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM)",
        "max_tokens is too large: 100000. This model supports at most 4096 completion tokens",
        "Invalid API key",
        "",
    ],
)
def test_not_overflow(text):
    assert not is_context_overflow(text)
    assert parse_limit(text) is None


def _openai_400(body):
    req = httpx.Request("POST", "http://localhost/v1/chat/completions")
    resp = httpx.Response(400, json=body, request=req)
    return openai.BadRequestError(body["error"]["message"], response=resp, body=body["error"])


def test_real_openai_error():
    exc = _openai_400(
        {
            "error": {
                "message": "This model's maximum context length is 16385 tokens. However, your messages resulted in 20000 tokens.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    )
    assert is_context_overflow(exc)
    assert parse_limit(exc) == 16385
    code_only = _openai_400(
        {
            "error": {
                "message": "bad",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        }
    )
    assert is_context_overflow(code_only)
    other = _openai_400(
        {
            "error": {
                "message": "Invalid value for 'temperature'",
                "type": "invalid_request_error",
                "code": None,
            }
        }
    )
    assert not is_context_overflow(other)


def test_real_anthropic_error():
    import anthropic

    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 210000 tokens > 200000 maximum",
        },
    }
    req = httpx.Request("POST", "https://api.anthropic.com/v1/messages")
    exc = anthropic.BadRequestError(
        "Error code: 400", response=httpx.Response(400, json=body, request=req), body=body
    )
    assert is_context_overflow(exc)
    assert parse_limit(exc) == 200000


def test_class_name_and_chain():
    class ContextWindowExceededError(Exception):
        pass

    assert is_context_overflow(ContextWindowExceededError("x"))
    try:
        try:
            raise ValueError("prompt is too long: 5 tokens > 4 maximum")
        except ValueError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert is_context_overflow(outer)
        assert parse_limit(outer) == 4


def test_register_pattern():
    assert not is_context_overflow("ctx full, max 999")
    pat = register_overflow_pattern(r"ctx full, max (?P<limit>\d+)", provider="acme")
    try:
        assert is_context_overflow("ctx full, max 999")
        assert parse_limit("ctx full, max 999") == 999
        assert overflow.overflow_patterns()[0] is pat
    finally:
        unregister_overflow_pattern(pat)
    assert not is_context_overflow("ctx full, max 999")


# --------------------------------------------------------------------------- plan by sums


def recount_emergency(opts: EmergencyOptions, count, target: int, units):
    """The layer as defined: every candidate (rounds kept, truncated or not) counted
    exactly, one round fewer while above the target."""
    from ctxpolicy.layers._util import round_groups
    from ctxpolicy.layers.emergency import _truncate_unit, always_kept, fewest_rounds

    groups = round_groups(units)
    always = set(always_kept(opts, units, groups))
    fewest = fewest_rounds(opts)
    for rounds in range(opts.keep_recent_rounds, fewest - 1, -1):
        keep_groups = groups[max(0, len(groups) - rounds) :] if rounds else []
        keep = always | {i for g in keep_groups for i in g}
        kept = [u for i, u in enumerate(units) if i in keep]
        truncated = None
        if opts.max_result_chars is not None and count(kept) > target:
            kept = [
                _truncate_unit(u, opts.max_result_chars)[0]
                if u.kind == "step" and not u.pinned
                else u
                for u in kept
            ]
            truncated = True
        if rounds == fewest or count(kept) <= target:
            break
    return kept, truncated


@settings(max_examples=120, deadline=None)
@given(
    n=st.integers(0, 12),
    size=st.integers(1, 60),
    keep=st.integers(0, 6),
    fewest=st.one_of(st.none(), st.integers(0, 6)),
    max_chars=st.one_of(st.none(), st.integers(0, 300)),
    share=st.floats(0.0, 1.1),
)
def test_plan_by_sums_is_the_recount_plan(n, size, keep, fewest, max_chars, share) -> None:
    c = Conv().system("sys").user("task")
    for k in range(n):
        c.step(("bash", {"cmd": f"ls {k}"}, f"out{k} " * size * (1 + k % 3)))
    units = c.user("continue").units()
    target = int(approx_count(units) * share)
    opts = EmergencyOptions(
        keep_recent_rounds=keep, min_recent_rounds=fewest, max_result_chars=max_chars
    )
    res = Emergency(opts).apply(make_ctx(units, target=target), units)
    kept, truncated = recount_emergency(opts, approx_count, target, units)
    assert res.units == kept
    assert ("truncated_results" in res.report) == bool(truncated)
    assert check_units(units, res.units) == []
    # a count whose framing the per-unit sums miss (estimates low): the exact
    # recounts that follow still find the recount plan's result
    res = Emergency(opts).apply(make_ctx(units, target=target, count=framed), units)
    assert res.units == recount_emergency(opts, framed, target, units)[0]


def framed(units):
    return approx_count(units) + 3 + len(units) * len(units) // 4
