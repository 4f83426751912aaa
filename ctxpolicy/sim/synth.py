"""Deterministic synthetic agent sessions (seeded), for demos, tests and benchmarks.

Two families, both OpenAI Chat messages with real tool-call pairing:

* ``coding_session`` — a SWE-style agent: directory listings, big file reads,
  greps, pytest runs with failures, edits, parallel tool calls;
* ``data_session`` — a data-analysis agent: SQL queries returning large psql
  tables and JSON, CSV exports.

Built from :mod:`ctxpolicy.testing.conversations` (the vocabulary, tool calls and
call ids of every synthetic conversation). ``python -m ctxpolicy.sim.synth OUT_DIR`` writes ``examples/traces``-style JSONL files.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxpolicy.testing.conversations import WORDS, CallIds, tool_call

Message = dict[str, Any]

_WORDS = list(WORDS)


def _call(ids: CallIds, name: str, **args: Any) -> dict[str, Any]:
    return tool_call(ids.next(), name, args)


def _python_file(rng: random.Random, module: str, n_lines: int) -> str:
    lines = [
        f'"""{module}: generated module for the demo."""',
        "",
        "from __future__ import annotations",
        "",
    ]
    while len(lines) < n_lines:
        fn = f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{rng.randint(1, 999)}"
        lines.append(f"def {fn}(value: int, limit: int = {rng.randint(1, 512)}) -> int:")
        lines.append(
            f'    """Return the {rng.choice(_WORDS)} of ``value`` bounded by ``limit``."""'
        )
        for _ in range(rng.randint(2, 8)):
            lines.append(
                f"    value = (value * {rng.randint(2, 97)} + {rng.randint(0, 9)}) % (limit + 1)"
            )
        lines.append("    return value")
        lines.append("")
    return "\n".join(lines[:n_lines])


def _pytest_output(rng: random.Random, n_tests: int, failing: list[str], path: str) -> str:
    out = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
        f"collected {n_tests} items",
        "",
    ]
    per_file = max(1, n_tests // 5)
    for f in range(5):
        marks = "".join(
            "F" if (f * per_file + i) % 17 == 3 and failing else "." for i in range(per_file)
        )
        out.append(f"tests/test_mod{f}.py {marks}   [{(f + 1) * 20:3d}%]")
    out.append("")
    if failing:
        out.append(
            "=================================== FAILURES ==================================="
        )
        for name in failing:
            line = rng.randint(10, 400)
            out += [
                f"_________________________________ {name} _________________________________",
                "",
                f"    def {name}():",
                f">       assert parse_budget({rng.randint(1000, 99999)}) == {rng.randint(1000, 99999)}",
                f"E       AssertionError: assert {rng.randint(1000, 99999)} == {rng.randint(1000, 99999)}",
                "",
                f"{path}:{line}: AssertionError",
            ]
        out.append(
            "=========================== short test summary info ============================"
        )
        out += [f"FAILED tests/test_mod0.py::{name} - AssertionError" for name in failing]
        out.append(
            f"========================= {len(failing)} failed, {n_tests - len(failing)} passed in 3.21s ========================="
        )
    else:
        out.append(
            f"============================== {n_tests} passed in 2.87s =============================="
        )
    return "\n".join(out)


def coding_session(seed: int = 7, steps: int = 32, file_lines: int = 500) -> list[Message]:
    """A SWE-style session: reads, greps, failing then passing test runs."""
    rng = random.Random(seed)
    ids = CallIds()
    pkg = f"pkg{seed}"
    files = [f"src/{pkg}/{rng.choice(_WORDS)}_{i}.py" for i in range(8)]
    bug_file = files[3]
    msgs: list[Message] = [
        {
            "role": "system",
            "content": "You are a careful software engineer. Use the tools to inspect the repository, "
            "run the tests, and fix the bug. Never modify tests.",
        },
        {
            "role": "user",
            "content": f"The test suite fails on `parse_budget` (issue #{1000 + seed}). Fix the bug in "
            f"{bug_file} without changing the public API. Constraint: keep Python 3.9 compatibility.",
        },
    ]
    failing = [f"test_{rng.choice(_WORDS)}_{i}" for i in range(3)]
    for step in range(steps):
        kind = step % 8
        if kind == 0:
            calls = [_call(ids, "execute_command", command=f"ls -R src/{pkg}")]
            results = ["\n".join([*files, f"src/{pkg}/__init__.py", "tests/", "pyproject.toml"])]
            thought = "Let me look at the layout of the repository."
        elif kind in (1, 5):
            target = files[(step // 2) % len(files)]
            calls = [_call(ids, "read_file", path=target)]
            results = [_python_file(rng, target, file_lines + rng.randint(-200, 200))]
            thought = f"I will read {target} to understand the code."
        elif kind == 2:
            calls = [
                _call(ids, "search_code", pattern="parse_budget", path="src"),
                _call(ids, "search_code", pattern="reserve_output", path="src"),
            ]
            results = [
                "\n".join(
                    f"{rng.choice(files)}:{rng.randint(1, 900)}:    value = parse_budget(limit)"
                    for _ in range(40)
                ),
                "\n".join(
                    f"{rng.choice(files)}:{rng.randint(1, 900)}:    reserve_output = {rng.randint(1, 9000)}"
                    for _ in range(25)
                ),
            ]
            thought = "Searching for the call sites in parallel."
        elif kind in (3, 7):
            still_failing = failing if step < steps * 0.7 else []
            calls = [_call(ids, "run_tests", path="tests", verbose=True)]
            results = [_pytest_output(rng, 250, still_failing, bug_file)]
            thought = "Running the test suite."
        elif kind == 4:
            calls = [_call(ids, "edit_file", path=bug_file, old="limit + 1", new="limit")]
            results = [f"Edited {bug_file}: 1 replacement at line {rng.randint(10, 800)}."]
            thought = f"The off-by-one is in {bug_file}; editing it."
        else:
            calls = [_call(ids, "search_logs", query="ERROR", service="ci")]
            log = []
            for i in range(600):
                lvl = rng.choices(["INFO", "DEBUG", "WARN", "ERROR"], weights=[60, 30, 7, 3])[0]
                log.append(
                    f"2026-11-{1 + i % 28:02d}T10:{i % 60:02d}:00Z {lvl} worker-{i % 7} {rng.choice(_WORDS)} {rng.choice(_WORDS)} took {rng.randint(1, 900)}ms"
                )
            results = ["\n".join(log)]
            thought = "Checking the CI logs for errors."
        msgs.append({"role": "assistant", "content": thought, "tool_calls": calls})
        for call, res in zip(calls, results, strict=True):
            msgs.append({"role": "tool", "tool_call_id": call["id"], "content": res})
        if step in (steps // 3, 2 * steps // 3):
            msgs.append(
                {"role": "user", "content": "Status? Remember: do not change the public API."}
            )
    msgs.append(
        {"role": "assistant", "content": f"Fixed the off-by-one in {bug_file}; all 250 tests pass."}
    )
    return msgs


def _psql_table(rng: random.Random, n_rows: int) -> str:
    header = " order_id | customer_id | region | amount  | status    | created_at"
    sep = "----------+-------------+--------+---------+-----------+---------------------"
    rows = [header, sep]
    for i in range(n_rows):
        rows.append(
            f" {100000 + i:8d} | C{rng.randint(1000, 9999):10d} | {rng.choice(['EU', 'US', 'APAC', 'LATAM']):6s} | "
            f"{rng.uniform(1, 5000):7.2f} | {rng.choice(['paid', 'refunded', 'pending']):9s} | 2026-10-{1 + i % 28:02d} 12:00:00"
        )
    rows.append(f"({n_rows} rows)")
    return "\n".join(rows)


def data_session(seed: int = 11, steps: int = 24) -> list[Message]:
    """A data-analysis session with large SQL results and JSON exports."""
    rng = random.Random(seed)
    ids = CallIds()
    msgs: list[Message] = [
        {
            "role": "system",
            "content": "You are a data analyst. Query the warehouse with the tools; report numbers exactly.",
        },
        {
            "role": "user",
            "content": "Which region had the highest refund rate in October 2026? Report order ids of the 5 largest refunds. "
            "Constraint: only use the `orders` and `refunds` tables.",
        },
    ]
    for step in range(steps):
        if step % 3 == 0:
            calls = [
                _call(
                    ids,
                    "query_database",
                    sql=f"SELECT * FROM orders WHERE created_at >= '2026-10-01' LIMIT {150 + step * 5}",
                )
            ]
            results = [_psql_table(rng, 150 + step * 5)]
        elif step % 3 == 1:
            calls = [
                _call(
                    ids,
                    "query_database",
                    sql="SELECT region, count(*) FROM refunds GROUP BY region",
                ),
                _call(ids, "fetch_json", url=f"https://warehouse.internal/api/exports/{step}"),
            ]
            results = [
                _psql_table(rng, 40),
                json.dumps(
                    {
                        "export": step,
                        "items": [
                            {
                                "id": f"R{rng.randint(10000, 99999)}",
                                "amount": round(rng.uniform(1, 900), 2),
                                "tags": [rng.choice(_WORDS) for _ in range(4)],
                            }
                            for _ in range(120)
                        ],
                    }
                ),
            ]
        else:
            calls = [_call(ids, "python", code="df.groupby('region').refund_rate.mean()")]
            results = [
                f"region\nAPAC     0.{rng.randint(10, 99)}\nEU       0.{rng.randint(10, 99)}\nLATAM    0.{rng.randint(10, 99)}\nUS       0.{rng.randint(10, 99)}\nName: refund_rate, dtype: float64"
            ]
        msgs.append(
            {"role": "assistant", "content": f"Step {step}: querying.", "tool_calls": calls}
        )
        for call, res in zip(calls, results, strict=True):
            msgs.append({"role": "tool", "tool_call_id": call["id"], "content": res})
    msgs.append({"role": "assistant", "content": "APAC had the highest refund rate."})
    return msgs


def large_session(target_tokens: int = 500_000, seed: int = 3) -> list[Message]:
    """A long coding session of roughly ``target_tokens`` cl100k tokens (≈3.6 chars/token)."""
    out: list[Message] = []
    i = 0
    while sum(len(str(m.get("content") or "")) for m in out) < target_tokens * 3.6:
        part = coding_session(seed=seed + i, steps=40, file_lines=900)
        if out:
            part = [m for m in part if m["role"] != "system"]
            for m in part:  # keep tool-call ids unique across parts
                for tc in m.get("tool_calls") or []:
                    tc["id"] = f"{tc['id']}_{i}"
                if m["role"] == "tool":
                    m["tool_call_id"] = f"{m['tool_call_id']}_{i}"
        out.extend(part)
        i += 1
    return out


def write_jsonl(path: Path, messages: list[Message]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for m in messages:
            fh.write(json.dumps(m, ensure_ascii=False) + "\n")


def demo_traces() -> Iterator[tuple[str, list[Message]]]:
    yield "coding-session.jsonl", coding_session()
    yield "data-analysis-session.jsonl", data_session()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out_dir = Path(args[0] if args else "examples/traces")
    for name, msgs in demo_traces():
        write_jsonl(out_dir / name, msgs)
        print(f"wrote {out_dir / name} ({len(msgs)} messages)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
