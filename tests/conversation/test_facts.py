from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation.facts import (
    DERIVED_HEADING,
    Facts,
    error_lines,
    extract,
    first_facts,
    missing_facts,
    units_text,
)
from tests.helpers_conv import Conv
from tests.strategies import joined

TEXT = """Read src/app/config.py and /etc/nginx/nginx.conf; docs at https://example.com/a/b?x=1.
Booking ABC123, ticket JIRA-4521, commit 3f2a9c1d, id 123e4567-e89b-12d3-a456-426614174000.
Took 250 ms with 16GB RAM over 3 files. ValueError: bad; ConnectionTimeout.
Use `parse_config` and max_connections=10. See README.md.
Traceback (most recent call last):
E   AssertionError: 1 != 2"""


def test_extract_exact():
    assert extract(TEXT) == Facts(
        paths=["src/app/config.py", "/etc/nginx/nginx.conf", "README.md"],
        urls=["https://example.com/a/b?x=1"],
        ids=["123e4567-e89b-12d3-a456-426614174000", "3f2a9c1d", "ABC123", "JIRA-4521"],
        numbers=["250 ms", "16GB", "3 files"],
        errors=["ValueError", "ConnectionTimeout", "AssertionError"],
        symbols=["parse_config"],
        settings=["max_connections=10"],
    )
    assert extract(TEXT) == extract(TEXT)
    assert extract("") == Facts() and not Facts()


def test_no_false_ids():
    f = extract("the year 2024 and version 1.2.3 with deadbeef words like HTTP and GPT")
    assert f.ids == []
    assert extract("订单号 ORD2024001 已取消，用户 张三").ids == ["ORD2024001"]


def test_error_lines():
    assert error_lines(TEXT) == [
        "Took 250 ms with 16GB RAM over 3 files. ValueError: bad; ConnectionTimeout.",
        "Traceback (most recent call last):",
        "E   AssertionError: 1 != 2",
    ]
    assert error_lines("ok\nFAILED a\nFAILED b\nFAILED c", limit=2) == ["FAILED b", "FAILED c"]


# --------------------------------------------------------------------------- prefilters


def _extract_every_pattern(text: str) -> Facts:
    """:func:`extract` as defined: every pattern over the whole text, no prefilter."""
    from ctxpolicy.conversation import facts as f

    if not text:
        return Facts()
    urls = f._dedupe(u.rstrip(".,;:") for u in f._URL.findall(text))
    scrubbed = f._URL.sub(" ", text)
    uuids = f._UUID.findall(scrubbed)
    scrub2 = f._UUID.sub(" ", scrubbed)
    paths = f._dedupe(
        p
        for p in (f._clean_path(m) for m in f._PATH.findall(scrub2))
        if len(p) > 1 and p not in ("/", "./", "../") and not p.startswith("//")
    )
    hexes = [h for h in f._HEX.findall(scrub2) if not h.isdigit()]
    tickets = [
        t
        for t in f._TICKET.findall(scrub2)
        if any(c.isalpha() for c in t) and not f._is_unit_number(t)
    ]
    return Facts(
        paths=paths,
        urls=urls,
        ids=f._dedupe([*uuids, *hexes, *tickets]),
        numbers=f._dedupe(n.strip() for n in f._NUMBER.findall(scrub2)),
        errors=f._dedupe([*f._EXCEPTION.findall(scrub2), *f._ERRNO.findall(scrub2)]),
        symbols=f._dedupe(
            s.strip() for s in f._BACKTICK.findall(text) if s.strip() and not s.strip().isdigit()
        ),
        settings=f._dedupe(
            f"{k}={v.rstrip('.,;:')}" for k, v in f._ASSIGN.findall(scrub2) if v.rstrip(".,;:")
        ),
    )


FRAGMENTS = [
    " ", "\n", "\t", "/", "./", "../", "~/", ".", "src", "a_b", "py", ".py", ".json", "x.y",
    "http://", "HTTPS://h.io/p", "://", "-", "3f2a9c1e", "0123abcd-0123-abcd-abcd-0123456789ab",
    "abcdefab-abcd-abcd-abcd-abcdefabcdef", "ORD_2024_001", "JIRA-42", "250 ms", "16GB", "12",
    "٣٤", "ValueError", "TimeoutError", "HTTP 404", "ENOENT", "`sym`", "`", "k=v", "a := 3",
    "max_connections=10", "'q'", '"', "é", "@", "+", ":",
]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(st.text(max_size=120), joined(FRAGMENTS, 40)))
def test_prefilters_change_nothing(text: str) -> None:
    assert extract(text) == _extract_every_pattern(text)


def test_prefilters_on_real_traces() -> None:
    from tests.shared_data import shared_traces

    for path in shared_traces()[:6]:
        text = path.read_text(encoding="utf-8")[:30_000]
        assert extract(text) == _extract_every_pattern(text), path.name


CATEGORIES = ["paths", "urls", "ids", "numbers", "errors", "symbols", "settings"]


@settings(max_examples=200, deadline=None)
@given(
    text=joined(FRAGMENTS, 40),
    only=st.sets(st.sampled_from(CATEGORIES)),
)
def test_only_the_categories_asked_for(text: str, only: set[str]) -> None:
    full = extract(text)
    assert extract(text, only=only) == Facts(**{c: getattr(full, c) for c in only})


_FRAGMENT = st.sampled_from(
    [
        "src/a.py",
        "see ./b/c.txt",
        "https://x.io/p/q.md",
        "123e4567-e89b-12d3-a456-426614174000",
        "ABC123",
        "250 ms",
        "ValueError",
        "`f`",
        "k=v",
        "docs/",
        "=",
        " ",
        "\n",
        "x.",
        "/",
        "README.md",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(_FRAGMENT, max_size=8).map("".join), max_size=12),
    st.integers(1, 6),
)
def test_first_facts_is_the_head_of_all_facts_of_the_joined_texts(
    texts: list[str], limit: int
) -> None:
    assert first_facts(iter(texts), limit) == extract("\n".join(texts)).all()[:limit]


def test_first_facts_of_a_derived_block_that_a_join_would_extend() -> None:
    # the joined text's derived block takes in the next text's indented lines
    texts = [f"wrote a/b.py\n{DERIVED_HEADING}", "  x/y.py v=1 ABC-12", "done c/d.py"]
    assert first_facts(iter(texts), 10) == extract("\n".join(texts)).all()[:10]


def test_first_facts_stops_reading_once_enough_paths_are_found() -> None:
    read: list[int] = []

    def texts():  # type: ignore[no-untyped-def]
        for i in range(1000):
            read.append(i)
            yield f"wrote src/module_{i}.py"

    assert first_facts(texts(), 5) == [f"src/module_{i}.py" for i in range(5)]
    assert len(read) == 5


def test_a_preprocessors_own_column_summary_is_not_mined() -> None:
    """Issue 27.3: table_rows' ``distinct=… min=… max=…`` lines are statistics of its
    own, not what the tool printed: no ``1487 min``/``min=0.2`` facts from them, while
    the rows it shows still give theirs."""
    import json as _json

    from ctxpolicy.preprocessors.table_rows import TableRows, TableRowsOptions

    rows = [{"order_id": f"ORD-{i:05d}", "minutes": 1000 + i, "rate": i / 7} for i in range(500)]
    pre = TableRows(TableRowsOptions(max_rows=3))
    text = pre.process(_json.dumps(rows))
    assert "distinct=" in text  # the summary is there for the model
    facts = extract(text).all()
    assert "ORD-00000" in facts  # a shown row
    assert not [f for f in facts if "min" in f or "max" in f or "distinct" in f], facts


def test_without_derived_is_linear_and_keeps_the_rest() -> None:
    from ctxpolicy.conversation.facts import DERIVED_HEADING, without_derived

    block = f"{DERIVED_HEADING}\n  a: distinct=3 min=1 max=9\n  b: distinct=2\n"
    text = "before /src/app.py\n" + block + "after ValueError\n"
    assert without_derived(text) == "before /src/app.py\n\nafter ValueError\n"
    assert without_derived(block * 20_000).count("distinct") == 0


def test_missing_facts():
    before = (
        Conv()
        .user("fix ABC123 in src/a.py")
        .step(("read_file", {"path": "src/b.py"}, "KeyError"))
        .units()
    )
    after = before[:1]
    facts = extract(units_text(before)).all()
    assert missing_facts(facts, after, None) == ["src/b.py", "KeyError"]
    assert missing_facts(facts, after, "ledger: src/b.py KeyError") == []
    assert missing_facts(facts, before, None) == []


def test_remembered_facts_are_the_facts_and_each_call_gets_its_own() -> None:
    """extract is a pure function: a remembered text gives what extracting it afresh
    gives, a caller changing its Facts changes nothing for the next one, and a text
    over the memo's limit is extracted every time (same answer)."""
    from ctxpolicy.conversation import facts as facts_module

    text = "see /src/app.py and https://x.org/a, id 9f3ab2c1d4, took 12 ms: ValueError"
    first = extract(text)
    first.paths.append("/mutated")
    again = extract(text)
    assert "/mutated" not in again.paths
    assert again == facts_module._extract(text, facts_module._ALL)
    assert extract(text, only=("paths",)).urls == []  # keyed by the categories too
    long = text + " x" * facts_module._MEMO_CHARS
    hits = facts_module._extract_memo.hits
    assert extract(long) == facts_module._extract(long, facts_module._ALL)
    assert facts_module._extract_memo.hits == hits


def test_extract_memo_is_bounded_by_characters() -> None:
    """The memo forgets the least recently used texts once it holds its limit in
    characters, whatever their number; a forgotten text is extracted afresh."""
    from ctxpolicy.conversation.facts import _ALL, _extract, _Memo

    memo = _Memo(total_chars=100)
    texts = [f"/src/m{i:02d}/file_{i:03d}.py took {i} ms" for i in range(10)]  # 29-30 chars
    for t in texts:
        memo.put((t, _ALL), _extract(t, _ALL))
    assert memo.chars <= 100 and len(memo) == 3
    assert memo.get((texts[0], _ALL)) is None
    assert memo.get((texts[-1], _ALL)) == _extract(texts[-1], _ALL)
    memo.cache_clear()
    assert (len(memo), memo.chars, memo.hits) == (0, 0, 0)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab/.=-:0 9`\nE_rrorx"), max_size=60))
def test_extract_remembered_equals_afresh(text: str) -> None:
    from ctxpolicy.conversation import facts as facts_module

    assert extract(text) == facts_module._extract(text, facts_module._ALL)
    assert extract(text) == extract(text)


def test_statistics_and_their_cut_fragments_are_no_facts() -> None:
    from ctxpolicy.conversation.facts import extract, is_derived_line, without_derived

    cut = (
        "id,name\n1,a\ncolumn summary (all rows):\n  id: distinct=400 min=1 max=400\n"
        "  name: d[… 40 chars elided …]\nistinct=40 min=3 max=9 nulls=2\nrows=400 timeout=3 min"
    )
    assert is_derived_line("istinct=40 min=3 max=9") and is_derived_line("  a: nulls=2")
    assert not is_derived_line("max_connections=10") and not is_derived_line("took 3 min")
    assert "istinct" not in without_derived(cut)
    facts = extract(cut)
    assert "3 min" in facts.numbers  # the real one, on its own line
    assert not [s for s in facts.settings if s.startswith(("min=", "max=", "istinct", "nulls"))]
    assert "rows=400" in facts.settings


def test_user_turns_and_call_sources() -> None:
    from ctxpolicy.conversation.facts import (
        INSTRUCTION_CHARS,
        MAX_INSTRUCTIONS,
        call_source,
        instruction_text,
        user_instructions,
    )

    msgs = [
        {"role": "user", "content": "  keep the API  "},
        {"role": "user", "content": "[tool result c1]: ok"},
        {"role": "assistant", "content": "fine"},
        *({"role": "user", "content": f"turn {i}"} for i in range(MAX_INSTRUCTIONS + 5)),
    ]
    got = user_instructions(msgs)
    assert len(got) == MAX_INSTRUCTIONS and got[-1] == f"turn {MAX_INSTRUCTIONS + 4}"
    assert user_instructions(msgs[:3]) == ["keep the API"]
    long = instruction_text("x" * (INSTRUCTION_CHARS + 10))
    assert long.startswith("x" * INSTRUCTION_CHARS) and long.endswith("compacted history]")
    assert call_source("edit", {"path": "a.py"}) == "edit:a.py"
    assert call_source("bash", {"command": "pytest -x"}) == "bash:pytest"
    assert call_source("sql", {"sql": "SELECT 1"}) == "sql"


def test_a_clients_reminders_are_not_the_users_instructions() -> None:
    from ctxpolicy.conversation.facts import instruction_text, is_user_turn, without_client_notes

    turn = "<system-reminder>\nUse the todo tool.\n</system-reminder>\nFix the login bug."
    assert instruction_text(turn) == "Fix the login bug."
    assert not is_user_turn({"role": "user", "content": "<system-reminder>x</system-reminder>"})
    assert without_client_notes("a <system-reminder>unclosed") == "a <system-reminder>unclosed"
    many = "<system-reminder>" * 20_000  # unclosed openings: one pass, left as written
    assert without_client_notes(many) == many
