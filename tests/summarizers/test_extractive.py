from typing import Any

from ctxpolicy.components import SummaryRequest
from ctxpolicy.summarizers.extractive import Digest, ExtractiveOptions, ExtractiveSummarizer
from tests.helpers_conv import Conv, approx_text, ref_line


def msgs():
    return (
        Conv()
        .user("Fix the login bug in src/auth/login.py for ticket AUTH-142")
        .step(
            (
                "read_file",
                {"path": "src/auth/login.py"},
                "def login():\n    pool = connect(max_connections=10)\n"
                + ref_line("c", 1, "read_file"),
            ),
            text="Reading the file first",
        )
        .step(
            (
                "run_tests",
                {"path": "tests/test_login.py"},
                "FAILED tests/test_login.py::test_ok - AssertionError: 401 != 200\n1 failed in 2.5s",
            )
        )
        .assistant("The pool is too small; next: raise max_connections to 50")
        .messages
    )


def ruled(
    messages: list[dict],  # type: ignore[type-arg]
    previous_summary: str | None = None,
    max_tokens: int = 1000,
    **kw: Any,
) -> SummaryRequest:
    """A request under the rule "Never push to main"."""
    return SummaryRequest(
        messages=messages,
        previous_summary=previous_summary,
        max_tokens=max_tokens,
        instructions="",
        constraints=("Never push to main",),
        **kw,
    )


def test_exact_digest():
    req = ruled(msgs(), count_text=approx_text)
    out = ExtractiveSummarizer().summarize(req)
    assert out == "\n".join(
        [
            "[Summary of earlier conversation (extractive digest)]",
            "Goal: Fix the login bug in src/auth/login.py for ticket AUTH-142",
            "Constraints:",
            "- Never push to main",
            "Files:",
            "- src/auth/login.py",
            "- tests/test_login.py",
            "Identifiers:",
            "- AUTH-142",
            "- pool=connect",
            "- max_connections=10",
            "- 2.5s",
            "Commands:",
            "- read_file(path=src/auth/login.py) → def login(): pool = connect(max_connections=10)"
            " [ctxsnap://c/step_001_read_file]",
            "- run_tests(path=tests/test_login.py) → FAILED tests/test_login.py::test_ok"
            " - AssertionError: 401 != 200; 1 failed in 2.5s",
            "Errors:",
            "- FAILED tests/test_login.py::test_ok - AssertionError: 401 != 200",
            "- 1 failed in 2.5s",
            "Decisions:",
            "- Reading the file first",
            "- The pool is too small; next: raise max_connections to 50",
        ]
    )
    # deterministic
    assert ExtractiveSummarizer().summarize(req) == out


def test_merges_previous_digest_and_bounds():
    first = ExtractiveSummarizer().summarize(ruled(msgs()))
    more = Conv().step(("bash", {"cmd": "git diff"}, "diff --git a/src/auth/pool.py")).messages
    merged = ExtractiveSummarizer().summarize(ruled(more, previous_summary=first))
    d = Digest.parse(merged)
    assert d is not None
    assert d.goal.startswith("Fix the login bug")
    assert d.sections["Constraints"] == ["Never push to main"]
    assert d.sections["Commands"][-1] == "bash(cmd=git diff) → diff --git a/src/auth/pool.py"
    assert merged.count("[Summary of earlier") == 1
    small = ExtractiveSummarizer().summarize(
        ruled(msgs(), previous_summary=merged, max_tokens=60, count_text=approx_text)
    )
    assert approx_text(small) <= 60
    assert "Never push to main" in small


def test_options_cap_items():
    s = ExtractiveSummarizer(ExtractiveOptions(max_items=1))
    out = s.summarize(
        SummaryRequest(messages=msgs(), previous_summary=None, max_tokens=1000, instructions="")
    )
    d = Digest.parse(out)
    assert d.sections["Commands"] == [
        "run_tests(path=tests/test_login.py) → FAILED tests/test_login.py::test_ok"
        " - AssertionError: 401 != 200; 1 failed in 2.5s"
    ]


# --- what a summary keeps (issue 27 item 3): no cut fragments, no markup, a real goal


def _summary(messages: list[dict]) -> str:  # type: ignore[type-arg]
    req = SummaryRequest(messages=messages, previous_summary=None, max_tokens=2000, instructions="")
    return ExtractiveSummarizer(ExtractiveOptions()).summarize(req)


def test_no_fragments_beside_a_character_cut() -> None:
    from ctxpolicy.preprocessors._text import head_tail_chars
    from ctxpolicy.summarizers.extractive import whole_lines

    text = "\n".join(f"line {i}: except SympifyError: raise" for i in range(200))
    cut = head_tail_chars(text, 400)
    kept = whole_lines(cut)
    assert "omitted" not in kept
    assert all(line.startswith("line ") for line in kept.splitlines() if line)
    conv = [
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "bash")]},
        {"role": "tool", "tool_call_id": "c1", "content": cut},
    ]
    out = _summary(conv)
    for line in out.splitlines():
        if "SympifyError" in line:
            assert "except SympifyError" in line, line


def test_whole_lines_is_linear_and_total() -> None:
    from ctxpolicy.summarizers.extractive import whole_lines

    assert whole_lines("") == ""
    assert whole_lines("no marker") == "no marker"
    marker = "\n... [5 chars omitted] ...\n"
    assert whole_lines("a" + marker + marker + "b") == "\n"
    big = ("x" * 1000 + marker) * 2000  # many markers on long lines: one pass
    assert len(whole_lines(big)) < len(big)


def test_closing_tags_are_not_paths() -> None:
    from ctxpolicy.conversation.facts import extract

    facts = extract("<output>ok</output> edited /testbed/sympy/core/basic.py </response_example>")
    assert facts.paths == ["/testbed/sympy/core/basic.py"]


def test_feedback_after_an_answer_is_not_the_goal() -> None:
    conv = [
        {"role": "assistant", "content": "Let me look.", "tool_calls": [_call("c1", "bash")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": "Please always provide EXACTLY ONE action."},
    ]
    assert "Goal:" not in _summary(conv)
    task = [{"role": "user", "content": "Fix BUG-1234 in the parser."}, *conv]
    assert "Goal: Fix BUG-1234" in _summary(task)


def _call(cid: str, name: str) -> dict:  # type: ignore[type-arg]
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


# --- the values a task produced (issue 27 item 3): a small computed result stays whole


def test_a_small_computed_result_is_kept_whole() -> None:
    table = (
        "region\nAPAC     0.47\nEU       0.57\nLATAM    0.54\nUS       0.88\n"
        "Name: refund_rate, dtype: float64"
    )
    messages = (
        Conv()
        .user("Which region had the highest refund rate?")
        .step(("python", {"code": "df.groupby('region').refund_rate.mean()"}, table))
        .messages
    )
    out = _summary(messages)
    assert "→ region; APAC 0.47; EU 0.57; LATAM 0.54; US 0.88; Name: refund_rate" in out


def test_a_long_result_keeps_its_first_line_and_skips_table_rules() -> None:
    rows = "\n".join(f"  {100000 + i} | C {i:04d} | EU" for i in range(200))
    out_text = " order_id | customer_id | region\n----------+-------------+-------\n" + rows
    messages = (
        Conv()
        .user("List the orders")
        .step(("query_database", {"sql": "SELECT * FROM orders"}, out_text))
        .messages
    )
    out = _summary(messages)
    assert "→ order_id | customer_id | region" in out and "-----" not in out


def test_the_data_analysis_example_keeps_the_rates_it_computed() -> None:
    """The shipped data-analysis trace: every refund-rate table the agent computed is in
    the digest, not ``python(code=…) → region``."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples/traces/data-analysis-session.jsonl"
    messages = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    req = SummaryRequest(
        messages=messages[1:-1], previous_summary=None, max_tokens=4000, instructions=""
    )
    out = ExtractiveSummarizer().summarize(req)
    tables = [m["content"] for m in messages if str(m.get("content", "")).startswith("region\n")]
    assert tables
    for t in tables:
        us = next(line for line in t.splitlines() if line.startswith("US"))
        assert " ".join(us.split()) in out


def test_digest_add_sees_changes_made_to_a_section_elsewhere() -> None:
    d = Digest()
    for item in ["a", " b ", "a", "", "c"]:
        d.add("Files", item)
    assert d.sections["Files"] == ["a", "b", "c"]
    d.sections["Files"].pop(0)  # trimmed: "a" may come back
    d.add("Files", "a")
    d.sections["Files"] = d.sections["Files"][-2:]  # replaced: "b" may come back
    d.add("Files", "b")
    d.add("Files", "c")
    assert d.sections["Files"] == ["c", "a", "b"]


def test_an_error_fixed_later_is_not_listed_and_statistics_are_no_outcome() -> None:
    from ctxpolicy.components import SummaryRequest
    from ctxpolicy.summarizers.extractive import ExtractiveOptions, ExtractiveSummarizer

    msgs = (
        Conv()
        .user("best month?")
        .step(("sql_query", {"sql": "SELECT x FROM salse"}, "Error: no such table: salse"))
        .step(("sql_query", {"sql": "SELECT x FROM sales"}, "column summary (all rows):\n  x: distinct=3 min=1 max=9"))
        .step(("bash", {"command": "cat nope.txt"}, "cat: nope.txt: No such file or directory error"))
        .messages
    )  # fmt: skip
    req = SummaryRequest(messages=msgs, previous_summary=None, max_tokens=2000, instructions="")
    out = ExtractiveSummarizer(ExtractiveOptions()).summarize(req)
    assert "salse" not in out.split("Errors:")[-1]  # fixed by the next query
    assert "nope.txt" in out.split("Errors:")[-1]  # still open
    assert "distinct=" not in out and "min=" not in out


def test_a_name_another_item_spells_out_is_said_once():
    """A file's base name beside its path, or an identifier inside a longer one, is
    left out of Files and Identifiers; each name is still in the digest."""
    m = (
        Conv()
        .user("Fix the collation bug")
        .step(
            (
                "bash",
                {"command": "grep -rn alter_field tests/migrations/test_writer.py"},
                "test_writer.py: BaseDatabaseSchemaEditor.alter_field and alter_field(self)",
            )
        )
        .messages
    )
    out = ExtractiveSummarizer().summarize(ruled(m, count_text=approx_text))
    names = [
        line[2:]
        for section in ("Files", "Identifiers")
        for line in out.split(f"{section}:\n", 1)[-1].split("\n")
        if line.startswith("- ")
    ]
    assert "tests/migrations/test_writer.py" in out
    assert "BaseDatabaseSchemaEditor.alter_field" in out
    assert "- test_writer.py" not in out.splitlines()
    assert "- alter_field" not in out.splitlines()
    assert len(set(out.splitlines())) == len(out.splitlines())
    assert names


def test_over_budget_commands_and_decisions_go_before_names() -> None:
    steps = Conv().user("Fix the collation of foreign keys")
    for k in range(8):
        names = " ".join(f"`schema_editor.alter_column_{k}_{j}_collation`" for j in range(4))
        steps = steps.step(("bash", {"command": f"ls d{k}"}, names), text=f"Step {k}")
    full = ExtractiveSummarizer().summarize(ruled(steps.messages, max_tokens=4000))
    d = Digest.parse(full)
    assert d is not None and len(d.sections["Identifiers"]) == 32
    # the largest section is the names; still the commands and decisions go first
    assert sum(map(len, d.sections["Identifiers"])) > sum(map(len, d.sections["Decisions"]))
    budget = approx_text(full) - approx_text("\n".join(d.sections["Commands"]))
    small = Digest.parse(
        ExtractiveSummarizer().summarize(
            ruled(steps.messages, max_tokens=budget, count_text=approx_text)
        )
    )
    assert small is not None
    assert small.sections["Identifiers"] == d.sections["Identifiers"]
    # the newest commands and decisions are the ones kept
    assert len(small.sections["Commands"]) < len(d.sections["Commands"])
    assert small.sections["Decisions"][-1] == d.sections["Decisions"][-1]


def test_names_the_agent_wrote_most_often_come_first() -> None:
    """``names``: code names of the agent's own replies and call arguments, the most
    written first; a name only a tool printed (an ``ls`` listing) is not one of them."""
    m = (
        Conv()
        .user("Fix the collation of foreign keys")
        .step(
            ("bash", {"command": "ls django/db"}, "backends_mysql\nsome_listed_module"),
            text="Look at schema_editor.alter_field and rel_db_params",
        )
        .step(
            ("bash", {"command": "grep -n rel_db_params schema.py"}, "12: found"),
            text="rel_db_params is built from new_rel.field",
        )
        .messages
    )
    out = ExtractiveSummarizer(ExtractiveOptions(names=2)).summarize(ruled(m))
    d = Digest.parse(out)
    assert d is not None
    assert d.sections["Names"] == ["rel_db_params", "new_rel.field"]
    assert "some_listed_module" not in d.sections["Names"]
    # off by default; a previous digest's names follow the new ones, within the limit
    assert Digest.parse(ExtractiveSummarizer().summarize(ruled(m))).sections["Names"] == []  # type: ignore[union-attr]
    again = ExtractiveSummarizer(ExtractiveOptions(names=3)).summarize(
        ruled(m[-2:], previous_summary=out)
    )
    assert Digest.parse(again).sections["Names"][:2] == ["rel_db_params", "new_rel.field"]  # type: ignore[union-attr]


def test_over_budget_names_the_agent_never_wrote_go_first() -> None:
    """With ``names``, Files and Identifiers the agent never wrote itself are trimmed
    before the ones it did, whatever their age."""
    listing = "\n".join(f"pkg/listed_{k}.py" for k in range(12))
    m = (
        Conv()
        .user("Fix the collation of foreign keys")
        .step(("bash", {"command": "cat src/schema.py"}, "def alter(): ..."), text="Read it")
        .step(("bash", {"command": "ls pkg"}, listing), text="Which files are there?")
        .messages
    )
    opts = ExtractiveOptions(names=5)
    full = Digest.parse(ExtractiveSummarizer(opts).summarize(ruled(m, max_tokens=4000)))
    assert full is not None and "src/schema.py" in full.sections["Files"]
    assert full.sections["Files"][-1] == "src/schema.py"  # written: last to be trimmed
    prose = approx_text("\n".join(full.sections["Commands"] + full.sections["Decisions"]))
    small = Digest.parse(
        ExtractiveSummarizer(opts).summarize(
            ruled(m, max_tokens=approx_text(full.render()) - prose - 20, count_text=approx_text)
        )
    )
    assert small is not None and "src/schema.py" in small.sections["Files"]
    assert len(small.sections["Files"]) < len(full.sections["Files"])
