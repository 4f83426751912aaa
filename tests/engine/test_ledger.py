"""The progress ledger: a typed, deterministic task state (engine/ledger.py)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import to_units
from ctxpolicy.engine.ledger import MAX_INSTRUCTIONS, ProgressLedger, check_stored
from ctxpolicy.engine.ledger_parts import HEADER, Todo, todo_list, tool_names
from tests.helpers_conv import Conv, approx_text, ref_line


def dropped():
    return (
        Conv()
        .user("Please also check the booking ABC123")
        .step(
            (
                "read_file",
                {"path": "src/db/pool.py"},
                "max_connections=10\n" + ref_line("c", 0, "read_file"),
            ),
            text="Checking the pool config",
        )
        .step(
            ("run_tests", {}, "ValueError: pool exhausted"),
            text="I decided to raise max_connections instead of adding a queue.",
        )
        .units(pin_first_user=False, pin_last_user=False)
    )


def test_exact_render_and_unit() -> None:
    assert ProgressLedger().render() is None and ProgressLedger().unit() is None
    led = ProgressLedger(constraints=["Never restart prod"])
    assert led.render().endswith("Constraints (verbatim):\n- Never restart prod")
    led.set_goal("Fix the connection pool")
    led.update(dropped())
    assert led.render() == "\n".join(
        [
            HEADER,
            "Goal: Fix the connection pool",
            "User instructions (verbatim, oldest first):",
            "- Please also check the booking ABC123",
            "Constraints (verbatim):",
            "- Never restart prod",
            "Done:",
            "- step 0: read_file(path=src/db/pool.py) → max_connections=10",
            "- step 1: run_tests() → ValueError: pool exhausted",
            "Artifacts (latest state):",
            "- src/db/pool.py: read (step 0)",
            "Decisions:",
            "- I decided to raise max_connections instead of adding a queue.",
            "Open errors:",
            "- ValueError: pool exhausted",
        ]
    )
    u = led.unit()
    assert u is not None and u.kind == "ledger" and u.pinned and u.key == "ledger"
    assert u.messages[0]["content"] == led.render()


def test_an_error_fixed_later_is_closed() -> None:
    led = ProgressLedger()
    units = (
        Conv()
        .step(("execute_sql", {"sql": "SELECT * FROM salse"}, "Error: no such table: salse"))
        .step(("execute_sql", {"sql": "SELECT * FROM sales"}, "month|total\n1|10\n2|20"))
        .units(pin_first_user=False, pin_last_user=False)
    )
    led.update(units[:1])
    assert led.errors == ["Error: no such table: salse"]
    led.update(units[1:])
    assert led.errors == []
    text = led.render()
    assert text is not None and "Open errors" not in text
    assert "table sales: queried (step 1)" in text


def test_small_computed_result_kept_whole_and_no_statistics_fragments() -> None:
    table = "month|revenue\n" + "\n".join(f"2023-{m:02d}|{1000 + 37 * m}" for m in range(1, 13))
    big = (
        "[table_rows: csv, 400 rows × 3 columns; showing first 2]\nid,name,min\n1,a,3\n"
        "... [398 more rows] ...\ncolumn summary (all rows):\n  id: distinct=400 min=1 max=400\n"
        "  name: d[… 40 chars elided …]\nistinct=40 min=3 max=9"
    )
    units = (
        Conv()
        .step(("sql_query", {"sql": "SELECT id, name FROM t"}, big))
        .step(("sql_query", {"sql": "SELECT month, sum(x) FROM sales GROUP BY 1"}, table))
        .units(pin_first_user=False, pin_last_user=False)
    )
    led = ProgressLedger(max_tokens=2000)
    led.update(units)
    text = led.render()
    assert text is not None
    assert table in text  # 12 rows, kept whole
    assert "istinct" not in text and "3 min" not in text and "min=" not in text


def test_todos_from_the_agents_own_tools_and_next_action_never_done() -> None:
    write = {
        "todos": [
            {"content": "Read the schema", "status": "completed", "activeForm": "Reading"},
            {"content": "Write the monthly query", "status": "in_progress"},
            {"content": "Report the best month", "status": "pending"},
        ]
    }
    plan = {"plan": [{"step": "Inspect repo", "status": "completed"}, {"step": "Fix bug"}]}
    assert todo_list("TodoWrite", write) == [
        Todo("Read the schema", "completed"),
        Todo("Write the monthly query", "in_progress"),
        Todo("Report the best month", "pending"),
    ]
    assert todo_list("update_plan", plan) == [
        Todo("Inspect repo", "completed"),
        Todo("Fix bug", "pending"),
    ]
    assert todo_list("write_file", write) is None
    led = ProgressLedger()
    led.update(
        Conv()
        .step(("TodoWrite", write, "ok"), text="Next: read the schema")
        .units(pin_first_user=False, pin_last_user=False)
    )
    text = led.render()
    assert text is not None
    assert (
        "- [x] Read the schema\n- [>] Write the monthly query\n- [ ] Report the best month" in text
    )
    assert led.next_step == "Write the monthly query"
    assert text.endswith("Next action: Write the monthly query")
    done = {"todos": [{"content": t, "status": "completed"} for t in ("a", "b")]}
    led.update(Conv().step(("todo_write", done, "ok")).units(pin_first_user=False))
    assert led.next_step is None


def test_an_intention_acted_on_is_not_the_next_action() -> None:
    led = ProgressLedger()
    led.update(
        Conv()
        .step(("bash", {"command": "ls"}, "a.py"), text="Next, I will list the files")
        .units(pin_first_user=False, pin_last_user=False)
    )
    assert led.next_step is None
    led.update(to_units([{"role": "assistant", "content": "Next step: run the tests"}])[0])
    assert led.next_step == "run the tests"


def test_recall_named_only_when_offered() -> None:
    led = ProgressLedger()
    led.archive = "ctxsnap://c/history"
    assert "ctx_recall" not in (led.render() or "")
    assert "kept verbatim outside this prompt: ctxsnap://c/history" in (led.render() or "")
    tools = [{"type": "function", "function": {"name": "ctx_recall"}}, {"name": "bash"}]
    assert tool_names(tools) == {"ctx_recall", "bash"}
    led.sync([], [], recall=True)
    assert "(read with ctx_recall): ctxsnap://c/history" in (led.render() or "")


def test_a_steps_reference_is_shown_only_with_recall() -> None:
    """A done step's snapshot reference is a handle for ctx_recall: shown when the model
    is offered the tool, left out otherwise (the archive line says where it all is)."""
    led = ProgressLedger()
    led.update(dropped())
    ref = "[ctxsnap://c/step_000_read_file]"
    assert ref not in (led.render() or "")
    assert "- step 0: read_file(path=src/db/pool.py) → max_connections=10\n" in (led.render() or "")
    led.sync([], [], recall=True)
    assert f"→ max_connections=10 {ref}" in (led.render() or "")


def test_a_steps_outcome_is_a_line_that_says_something() -> None:
    """A JSON result's first line is ``{``: the outcome is its first line with a letter
    or a digit."""
    led = ProgressLedger()
    page = '{\n  "kind": "page_observation",\n  "text": "RootWebArea"\n}'
    led.update(
        Conv()
        .step(("click", {"bid": "a12"}, page), text="Clicking")
        .units(pin_first_user=False, pin_last_user=False)
    )
    text = led.render() or ""
    assert '→ "kind": "page_observation",' in text
    assert "→ {" not in text


def test_sync_leaves_out_what_the_prompt_says_and_keeps_masked_tables() -> None:
    table = "region,share\nAPAC,0.47\nEU,0.57\nUS,0.61"
    conv = (
        Conv()
        .system("sys")
        .user("Which region grew most?")
        .step(("query_db", {"q": "SELECT region FROM r"}, table))
    )
    before = conv.units()
    led = ProgressLedger()
    led.set_goal("Which region grew most?")
    masked = [
        u.replace(
            messages=tuple(
                {**m, "content": "region,share\n[… 30 chars elided …]"}
                if m.get("role") == "tool"
                else m
                for m in u.messages
            )
        )
        for u in before
    ]
    assert led.sync(before, masked)
    text = led.render()
    assert text is not None and table in text
    assert "Goal:" not in text  # the pinned task says it


def test_bounded_never_drops_constraints_and_round_trip() -> None:
    led = ProgressLedger(
        max_tokens=80, constraints=["C1 keep me", "C2 keep me too"], count_text=approx_text
    )
    for k in range(50):
        led.update(Conv().step(("bash", {"cmd": f"make t{k}"}, f"/tmp/out{k}.log written")).units())
    text = led.render()
    assert text is not None and approx_text(text) <= 80
    assert "C1 keep me" in text and "C2 keep me too" in text
    assert "make t49" in text and "make t0" not in text
    again = ProgressLedger.from_dict(json.loads(json.dumps(led.to_dict())), count_text=approx_text)
    assert again.render() == text and again.to_dict() == led.to_dict()
    assert check_stored(led.to_dict())["done"] == led.done


def test_a_version_1_ledger_is_migrated() -> None:
    v1 = {
        "max_tokens": 1500,
        "constraints": ["No prod"],
        "goal": "Fix it",
        "done": ["step 1: bash(cmd=ls) → a.py"],
        "files": ["src/a.py"],
        "ids": ["ABC123", "https://x.test/a"],
        "errors": ["ValueError: x"],
        "next_step": "Let me run ls",  # the v1 next step may name a done step: dropped
        "archive": "ctxsnap://c/history",
    }
    led = ProgressLedger.from_dict(v1)
    assert led.goal == "Fix it" and led.files == ["src/a.py"]
    assert led.ids == ["ABC123", "https://x.test/a"] and led.errors == ["ValueError: x"]
    assert led.next_step is None and led.archive == "ctxsnap://c/history"
    assert led.to_dict()["v"] == 2
    assert ProgressLedger.from_dict(led.to_dict()).to_dict() == led.to_dict()


def test_a_loaded_ledger_keeps_the_newest_entries_of_each_list() -> None:
    data = ProgressLedger().to_dict() | {"done": [f"s{i}" for i in range(260)]}
    led = ProgressLedger.from_dict(data)
    assert led.done == [f"s{i}" for i in range(60, 260)]


def test_a_huge_drop_is_read_up_to_max_read_units() -> None:
    from ctxpolicy.engine import ledger_parts as mod

    c = Conv().user("the task")
    for k in range(mod.MAX_READ + 400):
        c.step(("bash", {"cmd": "true"}, f"ticket ORD_{k:05d}" if k % 40 == 0 else "ok"))
    led = ProgressLedger()
    led.update(c.units(pin_first_user=False, pin_last_user=False))
    assert led.goal == "the task"
    assert "ORD_00000" not in led.ids and f"ORD_{mod.MAX_READ + 360:05d}" in led.ids


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 200),
    limit=st.integers(0, 3000),
    width=st.integers(1, 60),
    constraints=st.lists(st.text(min_size=1, max_size=30), max_size=3),
)
def test_render_fits_the_bound_with_few_exact_counts(n, limit, width, constraints) -> None:
    """Trimming planned on an estimate still ends within the bound, by an exact count,
    unless only what is never trimmed is left."""
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return approx_text(text) + text.count("/")  # not len/4: the estimate is off

    led = ProgressLedger(limit, constraints, count_text=count)
    led.archive = "ctxsnap://c/history"
    for i in range(n):
        led.done.append(f"step {i}: " + "x/" * width)
        led.record_facts([f"src/m_{i}.py", f"ID{i:05d}"])
    led.goal = "goal " * 30
    text = led.render()
    assert text is not None and led.archive in text
    assert all(c.strip() in text for c in constraints)
    if count(text) > limit:  # nothing trimmable is left
        assert "Done:" not in text and "Files seen" not in text and "IDs seen" not in text
    assert len(counted) <= 8  # a few exact counts, not one per entry


# ------------------------------------------------------------------ invariants


def _turns() -> Any:
    text = st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x00"),
        min_size=1,
        max_size=120,
    ).filter(lambda t: t.strip() and not t.startswith("["))
    return st.lists(text, min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    turns=_turns(),
    todo_states=st.lists(st.sampled_from(["pending", "in_progress", "completed"]), max_size=5),
    split=st.integers(0, 40),
)
def test_invariants_instructions_verbatim_next_not_done_bounded(
    turns: list[str], todo_states: list[str], split: int
) -> None:
    """After any sequence of compactions: every user turn (within the bound) is in the
    ledger verbatim, the next action is never a completed step, the size is bounded."""
    conv = Conv().user("the goal")
    for i, t in enumerate(turns):
        conv.user(t)
        todos = [{"content": f"item {k}", "status": s} for k, s in enumerate(todo_states)]
        conv.step(
            ("TodoWrite", {"todos": todos}, "ok") if todos else ("bash", {"cmd": f"c{i}"}, "ok")
        )
    units = conv.units(pin_first_user=False, pin_last_user=False)
    led = ProgressLedger(max_tokens=4000)
    led.update(units[:split])
    led.update(units[split:])
    text = led.render()
    assert text is not None and len(text) < 4000 * 4
    kept = [t.strip() for t in turns][-MAX_INSTRUCTIONS:]
    for t in kept:
        assert t in text or t == "the goal"
    st_ = led.state
    completed = {t.text for t in st_.todos if t.status == "completed"}
    assert led.next_step not in completed
    if any(s != "completed" for s in todo_states):
        assert led.next_step is not None


def test_a_stored_ledger_of_the_wrong_shape_is_refused_by_name() -> None:
    import pytest

    from ctxpolicy.engine.stored import Invalid, check_ledger

    good = ProgressLedger(constraints=["c"]).to_dict()
    assert check_ledger(good)["v"] == 2
    for bad, what in (
        ({"todos": [{"status": "done"}]}, "ledger.todos"),
        ({"instructions": "one"}, "ledger.instructions"),
        ({"goal": 3}, "ledger.goal"),
        ({"instructions_dropped": -1}, "ledger.instructions_dropped"),
    ):
        with pytest.raises(Invalid, match=what):
            check_ledger({**good, **bad})
    # a version 1 ledger is still read (and migrated when loaded)
    assert check_ledger({"goal": "g", "files": ["a.py"]})["files"] == ["a.py"]


_SEEDED = """
from ctxpolicy.engine.ledger import ProgressLedger
from tests.helpers_conv import Conv
paths = " ".join(f"src/pkg{i}/mod{i}.py" for i in range(12))
units = Conv().step(("bash", {"cmd": "pytest " + paths}, "Error: 3 failed")).units(
    pin_first_user=False, pin_last_user=False
)
led = ProgressLedger(max_tokens=4000)
led.update(units)
print(led.render())
"""


def test_the_ledger_is_the_same_whatever_the_hash_seed() -> None:
    """Artifacts named by a failed call's arguments were listed in a set's order, so two
    processes (two workers, or a resume) wrote one conversation's ledger differently."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    outs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        run = subprocess.run(
            [sys.executable, "-c", _SEEDED], env=env, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr
        outs.add(run.stdout)
    assert len(outs) == 1
    assert "src/pkg0/mod0.py" in outs.pop()
