"""Cost of durable session state: per-call saves (sqlite, PostgreSQL) vs ``prepare`` itself.

Usage::

    python benchmarks/bench_state.py [--quick] [--repeat 3]

Replays the longest shared trace (most messages) under the ``coding_agent`` policy of
policies/agents.yaml at a 32k window, the way an agent drives a session:
``add_tool_result`` for each tool message and ``prepare`` before each assistant
message. Every call that changed the session's state saves it (an incremental
compare-and-set commit). Measured in the same run, interleaved per repeat:

* **memory** — the in-process store: the session's own work plus a dict update (the
  baseline: what the calls cost without durable state);
* **sqlite** — the default store, a WAL file on local disk (``synchronous: normal``);
* **postgres** — a real PostgreSQL 15 on localhost (started by the script; skipped with
  a note when it cannot start).

Reported: total time of the calls per store and its ratio to memory; the time spent
inside ``commit`` alone per call and its ratio to the time of ``prepare`` per call;
and how many bytes each save wrote against the size of the whole state (incremental
writes, not a rewrite of the history). ``--quick`` replays the first 160 messages once.
Writes benchmarks/results/bench_state.json and .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import SHARED, eprint, header_markdown, machine, markdown_table, publish

ROOT = Path(__file__).resolve().parents[1]
AGENT = "coding_agent"
WINDOW = 32768
STORES = ("memory", "sqlite", "postgres")


class Timed:
    """Wraps a store: time and bytes of every commit, time of every load. It offers
    what the store offers (``commit_encoded``, ``prune``), so a session takes the same
    path through it as through the store itself."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.commit_s: list[float] = []
        self.bytes: list[int] = []
        if callable(getattr(store, "commit_encoded", None)):
            self.commit_encoded = self._commit_encoded
        self.prune = store.prune

    def load(self, conv_id: str) -> Any:
        return self.store.load(conv_id)

    def commit(self, conv_id: str, **kw: Any) -> int:
        size = sum(len(json.dumps(v, ensure_ascii=False)) for v in kw["put"].values())
        return self._timed(self.store.commit, conv_id, size, kw)

    def _commit_encoded(self, conv_id: str, **kw: Any) -> int:
        size = sum(len(v) for v in kw["put"].values())  # already canonical JSON text
        return self._timed(self.store.commit_encoded, conv_id, size, kw)

    def _timed(self, commit: Any, conv_id: str, size: int, kw: dict[str, Any]) -> int:
        t0 = time.perf_counter()
        v = commit(conv_id, **kw)
        self.commit_s.append(time.perf_counter() - t0)
        self.bytes.append(size)
        return int(v)

    def close(self) -> None:
        self.store.close()


def _totals(run: dict[str, Any]) -> dict[str, Any]:
    """One replay in the results file: sums and counts, not every call's timing."""
    return {
        key: {"sum": sum(v), "n": len(v)} if isinstance(v, list) else v for key, v in run.items()
    }


def longest_trace() -> Path:
    files = sorted((SHARED / "traces").glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no traces in {SHARED / 'traces'}")
    return max(files, key=lambda p: sum(1 for _ in p.open()))


def replay(policy: Any, messages: list[dict[str, Any]], store: Any) -> dict[str, Any]:
    from ctxpolicy import Session

    timed = Timed(store)
    session = Session(policy, conv_id="bench", state_store=timed)  # type: ignore[arg-type]
    convo: list[dict[str, Any]] = []
    calls: dict[str, Any] = {}
    prepare_s: list[float] = []
    tool_s: list[float] = []
    for m in messages:
        if m["role"] == "assistant":
            t0 = time.perf_counter()
            session.prepare(convo)
            prepare_s.append(time.perf_counter() - t0)
            calls = {tc["id"]: tc for tc in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            call = calls.get(m["tool_call_id"]) or {"id": m["tool_call_id"], "function": {}}
            t0 = time.perf_counter()
            m = {**m, "content": session.add_tool_result(call, m["content"])}
            tool_s.append(time.perf_counter() - t0)
        convo.append(m)
    state = session.state_entries()
    return {
        "prepare_s": prepare_s,
        "tool_s": tool_s,
        "commit_s": timed.commit_s,
        "bytes": timed.bytes,
        "state_bytes": sum(len(json.dumps(v, ensure_ascii=False)) for v in state.values()),
        "entries": len(state),
        "compactions": sum(session.stats.compactions.values()),
    }


def open_store(kind: str, tmp: Path, dsn: str | None, run: int) -> Any:
    from ctxpolicy.state.memory import MemoryStateStore
    from ctxpolicy.state.postgres import PostgresOptions, PostgresStateStore
    from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore

    if kind == "memory":
        return MemoryStateStore()
    if kind == "sqlite":
        return SqliteStateStore(SqliteOptions(path=str(tmp / f"state-{run}.sqlite3")))
    assert dsn is not None
    return PostgresStateStore(PostgresOptions(dsn=dsn, table=f"bench{run}"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="first 160 messages, one repeat")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    from ctxpolicy import load_policy
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.replay import with_snapshots, with_window
    from ctxpolicy.testing.postgres import PostgresServer, PostgresUnavailable

    trace = longest_trace()
    messages = load_trace(trace)
    if args.quick:
        messages = messages[:160]
    repeat = 1 if args.quick else max(1, args.repeat)
    notes: list[str] = []
    server: PostgresServer | None = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as exc:
        notes.append(f"postgres skipped: {exc}")
        server = None
    kinds = [k for k in STORES if k != "postgres" or server is not None]
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-state-") as d:
            tmp = Path(d)
            base = with_window(load_policy(ROOT / "policies" / "agents.yaml", agent=AGENT), WINDOW)
            for run in range(repeat):
                for kind in kinds:  # interleaved: the machine is shared and noisy
                    policy = with_snapshots(base, tmp / f"snaps-{kind}-{run}")
                    store = open_store(kind, tmp, server.dsn if server else None, run)
                    eprint(f"run {run + 1}/{repeat}: {kind} ...")
                    results[kind].append(replay(policy, messages, store))
                    store.close()
    finally:
        if server is not None:
            server.stop()

    def med(kind: str, key: str, agg: Any = sum) -> float:
        return float(statistics.median(agg(r[key]) for r in results[kind]))

    calls = len(results["memory"][0]["prepare_s"]) + len(results["memory"][0]["tool_s"])
    prepares = len(results["memory"][0]["prepare_s"])
    total = {k: med(k, "prepare_s") + med(k, "tool_s") for k in kinds}
    commit = {k: med(k, "commit_s") for k in kinds}
    saves = {k: len(results[k][0]["commit_s"]) for k in kinds}
    prep = {k: med(k, "prepare_s") / prepares for k in kinds}
    per_save = {k: commit[k] / max(1, saves[k]) for k in kinds}
    first = results["sqlite"][0]
    info = machine(["ctxpolicy", "tiktoken", "psycopg"])
    data = {
        "machine": info,
        "trace": trace.name,
        "agent": AGENT,
        "window": WINDOW,
        "messages": len(messages),
        "calls": calls,
        "prepares": prepares,
        "repeat": repeat,
        "quick": args.quick,
        "notes": notes,
        "total_s": total,
        "commit_s": commit,
        "saves": saves,
        "prepare_per_call_s": prep,
        "commit_per_save_s": per_save,
        "bytes_per_save_median": statistics.median(first["bytes"]),
        "bytes_written_total": sum(first["bytes"]),
        "state_bytes_final": first["state_bytes"],
        "entries_final": first["entries"],
        "compactions": first["compactions"],
        "runs": {k: [_totals(r) for r in runs] for k, runs in results.items()},
    }
    rows = []
    for k in kinds:
        rows.append(
            [
                k,
                f"{total[k]:.2f} s",
                f"{total[k] / total['memory']:.2f}",
                f"{per_save[k] * 1000:.3f} ms",
                f"{prep[k] * 1000:.2f} ms",
                f"{per_save[k] / prep['memory']:.3f}",
            ]
        )
    md = [
        "## Session state",
        "",
        header_markdown(info),
        "",
        f"Trace `{trace.name}` ({len(messages)} messages: {prepares} `prepare` calls, "
        f"{calls - prepares} tool results, {first['compactions']} compactions) under "
        f"`{AGENT}` at a {WINDOW:,}-token window; every state-changing call saves its "
        f"changes with a compare-and-set commit. Median of {repeat} interleaved "
        f"run(s){' (--quick)' if args.quick else ''}.",
        "",
        markdown_table(
            "store | all calls | ÷ memory | commit per save | prepare per call | save ÷ prepare (memory)",
            rows,
            "lrrrrr",
        ),
        "",
        f"Incremental writes: a save wrote a median of {data['bytes_per_save_median']:,.0f} "
        f"bytes of JSON; the final state is {first['state_bytes']:,} bytes in "
        f"{first['entries']} entries; all {saves['sqlite']} saves together wrote "
        f"{sum(first['bytes']):,} bytes.",
    ]
    if notes:
        md += ["", *[f"_{n}_" for n in notes]]
    md += [
        "",
        "Reproduce: `.venv/bin/python benchmarks/bench_state.py` (`--quick`: 160 messages, "
        "one run; tests: `.venv/bin/pytest tests/state`)",
    ]
    publish("bench_state", data, "\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
