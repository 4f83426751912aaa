"""Replay real agent traces through the built-in preprocessors; print the savings table.

    python benchmarks/bench_preprocessors.py [TRACES_DIR]   (or: python -m benchmarks run preprocessors)

Every ``tool`` message of every ``*.jsonl`` trace (OpenAI chat format, one message
per line) goes through ``ToolResultProcessor`` with the ``coding_agent``-like rules
below (snapshots off, so no reference line is counted; with snapshots each result
gains one ``[Full detail available at: …]`` line of ~30 tokens). Tokens are counted
with ``ctxpolicy.tokens.TokenCounter`` (its backend is printed under the table).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

DEFAULT_TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"

LINES = {"preprocess": "head_tail_lines", "options": {"lines": 50, "min_lines": 200}}
OUTPUT = {"preprocess": "command_output", "options": {"head_lines": 40, "tail_lines": 60}}
PRUNE = {"preprocess": "json_prune", "options": {"max_array_items": 10, "max_string_chars": 200}}
#: coding_agent-like rules, by tool name (first matching glob wins, "*" last).
RULES: dict[str, dict[str, Any]] = {
    "run_tests": {"preprocess": "test_failures", "options": {"keep_failed_only": True}},
    "read_file": LINES,
    "open": LINES,
    "str_replace_editor": LINES,
    "search_logs": {
        "preprocess": "log_levels",
        "options": {"levels": ["ERROR", "WARN"], "last": 50},
    },
    "bash": OUTPUT,
    "execute_*": OUTPUT,
    "query_database": {"preprocess": "table_rows", "options": {"max_rows": 20}},
    "search_*": PRUNE,
    "get_*": PRUNE,
    "*": {"preprocess": "head_tail", "options": {"max_chars": 3000}},
}


def make_policy(tools: dict[str, Any] | None = None) -> Any:
    from ctxpolicy.policy.models import Policy

    doc: dict[str, Any] = {k: {} for k in ("budget", "thresholds", "pinned", "ledger", "cache")}
    doc |= {"agent": "coding_agent", "pipeline": [], "constraints": []}
    doc |= {"model": {"context_window": 128000, "tokenizer": "o200k_base"}}
    doc |= {"on_overflow": {"layer": "emergency"}, "snapshots": {"enabled": False}}
    return Policy.model_validate(doc | {"tools": tools if tools is not None else RULES})


def tool_messages(traces: Path) -> list[tuple[str, str, str]]:
    """(trace file, tool name, content) of every tool message."""
    out: list[tuple[str, str, str]] = []
    for f in sorted(traces.glob("*.jsonl")):
        names: dict[str, str] = {}
        for line in f.read_text("utf-8").splitlines():
            if not line.strip():
                continue
            msg = json.loads(line)
            for tc in msg.get("tool_calls") or []:
                names[tc.get("id", "")] = (tc.get("function") or {}).get("name", "")
            if msg.get("role") != "tool":
                continue
            content = msg.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            name = msg.get("name") or names.get(msg.get("tool_call_id", ""), "") or "unknown"
            out.append((f.name, name, content if isinstance(content, str) else json.dumps(content)))
    return out


def counter() -> tuple[Any, str]:
    from ctxpolicy.policy.models import ModelSpec
    from ctxpolicy.tokens import TokenCounter

    chain = ["o200k_base", "quicktok:o200k_base", "cl100k_base", "heuristic"]
    c = TokenCounter(ModelSpec(context_window=128000, tokenizer=chain))
    c.count_text("warm up")
    stats = c.stats()
    backend = stats.get("tokenizer") or stats.get("backend") or json.dumps(stats, default=str)[:120]
    return c.count_text, f"ctxpolicy.tokens.TokenCounter ({backend})"


def run(traces: Path = DEFAULT_TRACES) -> dict[str, Any]:
    from ctxpolicy.components import ToolCall
    from ctxpolicy.engine.tool_results import ToolResultProcessor

    proc = ToolResultProcessor(make_policy(), store=None)
    count, how = counter()
    rows: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    failures = 0
    msgs = tool_messages(traces)
    for _trace, name, content in msgs:
        out = proc.process(ToolCall(name), content, conv_id="bench", step=1)
        failures += sum(1 for e in out.events if e["type"] == "tool.preprocess_failed")
        r = rows[out.preprocessor or "none"]
        before, after = count(content), count(out.text)
        r["results"] += 1
        r["changed"] += int(out.text != content)
        r["tokens_before"] += before
        r["tokens_after"] += after
        r["max_before"] = max(r["max_before"], before)
        r["max_after"] = max(r["max_after"], after)
    return {
        "traces": len(list(traces.glob("*.jsonl"))),
        "tool_results": len(msgs),
        "counter": how,
        "preprocess_failed": failures,
        "rows": {k: dict(v) for k, v in sorted(rows.items())},
    }


def table(res: dict[str, Any]) -> str:
    lines = [
        "| preprocessor | tool results | shortened | tokens before | tokens after | saved | "
        "saved % | largest before → after |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    keys = ("results", "changed", "tokens_before", "tokens_after")
    for name, r in [*res["rows"].items(), ("all", None)]:
        n, ch, tb, ta = (
            sum(x[k] for x in res["rows"].values()) if r is None else r[k] for k in keys
        )
        pct = 100 * (tb - ta) / tb if tb else 0.0
        first = f"**{name}**" if r is None else f"`{name}`"
        most = "" if r is None else f" {r['max_before']:,} → {r['max_after']:,}"
        lines.append(
            f"| {first} | {n} | {ch} | {tb:,} | {ta:,} | {tb - ta:,} | {pct:.1f} % |{most} |"
        )
    lines.append("")
    lines.append(
        f"{res['tool_results']} tool results from {res['traces']} traces; tokens by "
        f"{res['counter']}; preprocessor failures: {res['preprocess_failed']}."
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Writes results/bench_preprocessors.{json,md}; ``--quick`` is accepted (the run is
    small already)."""
    args = [a for a in argv if not a.startswith("--")]
    traces = Path(args[0]) if args else DEFAULT_TRACES
    if not traces.is_dir():
        print(f"no traces directory at {traces}", file=sys.stderr)
        return 2
    res = run(traces)
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file
    from benchmarks._common import publish

    md = [
        "## Preprocessors",
        table(res),
        "Reproduce: `python -m benchmarks run preprocessors`",
    ]
    publish("bench_preprocessors", {**res, "quick": "--quick" in argv}, "\n\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
