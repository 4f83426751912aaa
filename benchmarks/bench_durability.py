"""What durable state costs per model call: the floors under it, and the saves themselves.

Default (results ``bench_floors``): the per-call replay of :mod:`benchmarks.peers.timing`
with the shipped durability and without its parts, against LangChain's
``SummarizationMiddleware`` (needs the ``langchain`` extra). ``--state`` (results
``bench_state``): every state-changing call saved to the memory store, sqlite and a real
PostgreSQL (started here; skipped with a note when it cannot start). The sections say
what each number is.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import (
    ROOT,
    SHARED,
    eprint,
    machine,
    markdown_table,
    parser,
    publish,
    trace_files,
)
from benchmarks._measure import changed, per_call_median

AGENT = "coding_agent"
WINDOW = 32768  # --state
STORES = ("memory", "sqlite", "postgres")
#: variant → (state store, snapshots on, one commit per model call)
VARIANTS = {
    "defaults": ("sqlite", True, False),
    "one commit per model call (emulated)": ("sqlite", True, True),
    "memory state": ("memory", True, False),
    "memory state, no snapshots": ("memory", False, False),
}


@contextlib.contextmanager
def one_commit_per_call(on: bool) -> Iterator[None]:
    """``add_tool_result`` saves nothing: its changes stay marked and go with the next
    ``prepare``'s commit — what merging the two commits of a model call would cost,
    without the guarantees that keep them apart (docs/state.md). Not a mode of the
    engine: a measurement for that decision (issue 32 item 2)."""
    if not on:
        yield
        return
    from ctxpolicy.engine.persistence import Persistence

    real = Persistence.run

    def run(self: Any, what: str, call: Any) -> Any:
        return call() if what == "add_tool_result" else real(self, what, call)

    Persistence.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        Persistence.run = real  # type: ignore[method-assign]


def floors(quick: bool, repeat: int) -> dict[str, Any]:
    """Every durability variant and LangChain, in turn per repeat, per trace."""
    from benchmarks._inputs import largest_traces, load_agent, smallest_trace
    from benchmarks.peers.others import langchain_steps, replay_langchain
    from benchmarks.peers.replay import replay_ctxpolicy
    from ctxpolicy.tokens import get_counter

    policy, note = load_agent(AGENT)
    policies = {True: policy, False: changed(policy, "snapshots", enabled=False)}
    counter = get_counter(policy.model, model_name=policy.model_name)
    rows = []
    for name, msgs in [smallest_trace()] if quick else largest_traces(3):
        eprint(f"floors: {name} ...")
        steps = langchain_steps(msgs)
        lc: list[list[float]] = []
        both: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
        prep: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
        for _ in range(repeat):
            lc.append(replay_langchain(policy, steps, counter.count_text))
            for v, (state, snapshots, merged) in VARIANTS.items():
                with one_commit_per_call(merged):
                    p, t = replay_ctxpolicy(policies[snapshots], msgs, state=state)
                prep[v].append(p)
                both[v].append([a + b for a, b in zip(p, t, strict=True)])
        lc_ms = per_call_median(lc) * 1e3
        ms = {v: (per_call_median(both[v]) * 1e3, per_call_median(prep[v]) * 1e3) for v in VARIANTS}
        variants = {
            v: {"both_ms": b, "prepare_ms": p, "both_over_langchain": b / lc_ms}
            | {"prepare_over_langchain": p / lc_ms}
            for v, (b, p) in ms.items()
        }
        rows.append(
            {"trace": name, "calls": len(lc[0]), "langchain_ms": lc_ms, "variants": variants}
        )
    data: dict[str, Any] = {"machine": machine(["langchain", "langchain-core"])}
    data |= {"policy": f"policies/agents.yaml:{AGENT}", "policy_note": note}
    return data | {"repeat": repeat, "traces": rows}


def floors_markdown(data: dict[str, Any]) -> str:
    table = []
    for r in data["traces"]:
        short = r["trace"].split(".")[-2] if r["trace"].count(".") >= 2 else r["trace"]
        for v, x in r["variants"].items():
            table.append([short, v, f"{x['both_ms']:.3f}", f"{x['both_over_langchain']:.2f}×"])
            table[-1] += [f"{x['prepare_ms']:.3f}", f"{x['prepare_over_langchain']:.2f}×"]
            table[-1] += [f"{r['langchain_ms']:.3f}"]
    return "\n\n".join(
        [
            "## Per-call cost without durability (issue 32)",
            f"`{data['policy']}` on the shared traces, {data['repeat']} repeat(s), every "
            "variant and LangChain's `SummarizationMiddleware` in turn; median ms per "
            "model call. The goal of issue 32 is `prepare` + `add_tool_result` ≤ 1.0× "
            "LangChain and `prepare` ≤ 0.6×, with durable snapshots and state on "
            "(`defaults`). `one commit per model call (emulated)` saves `add_tool_result`'s "
            "changes with the next `prepare`'s commit, for this measurement only "
            "(docs/state.md says why the engine keeps the two commits apart).",
            markdown_table(
                "trace | ctxpolicy | both calls ms | ÷ LangChain | prepare ms | ÷ LangChain | "
                "LangChain ms",
                table,
                align="llrrrrr",
            ),
            "Reproduce: `.venv/bin/python -m benchmarks run percall --variant floors`.",
        ]
    )


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
    files = trace_files()
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


def state(quick: bool, repeat: int) -> dict[str, Any]:
    """Every store, in turn per repeat: total, commit and bytes per save."""
    from ctxpolicy import load_policy
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.replay import with_snapshots, with_window
    from ctxpolicy.testing.postgres import PostgresServer, PostgresUnavailable

    trace = longest_trace()
    messages = load_trace(trace)[: 160 if quick else None]
    notes: list[str] = []
    server: PostgresServer | None = None
    try:
        (server := PostgresServer()).start()
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
    data: dict[str, Any] = {"machine": machine(["ctxpolicy", "tiktoken", "psycopg"])}
    data["trace"] = trace.name
    data |= {"agent": AGENT, "window": WINDOW, "messages": len(messages), "calls": calls}
    data |= {"prepares": prepares, "repeat": repeat, "notes": notes, "total_s": total}
    data |= {"commit_s": commit, "saves": saves, "prepare_per_call_s": prep}
    data |= {
        "commit_per_save_s": per_save,
        "bytes_per_save_median": statistics.median(first["bytes"]),
    }
    data |= {"bytes_written_total": sum(first["bytes"]), "state_bytes_final": first["state_bytes"]}
    data |= {"entries_final": first["entries"], "compactions": first["compactions"]}
    return data | {"runs": {k: [_totals(r) for r in runs] for k, runs in results.items()}}


def state_markdown(data: dict[str, Any]) -> str:
    total, per_save, prep = data["total_s"], data["commit_per_save_s"], data["prepare_per_call_s"]
    rows = [
        [k, f"{total[k]:.2f} s", f"{total[k] / total['memory']:.2f}", f"{per_save[k] * 1000:.3f} ms",
         f"{prep[k] * 1000:.2f} ms", f"{per_save[k] / prep['memory']:.3f}"]
        for k in total
    ]  # fmt: skip
    calls, prepares, repeat = data["calls"], data["prepares"], data["repeat"]
    md = [
        "## Session state",
        f"Trace `{data['trace']}` ({data['messages']} messages: {prepares} `prepare` calls, "
        f"{calls - prepares} tool results, {data['compactions']} compactions) under "
        f"`{AGENT}` at a {WINDOW:,}-token window; every state-changing call saves its "
        f"changes with a compare-and-set commit. Median of {repeat} interleaved "
        f"run(s){' (--quick)' if data['quick'] else ''}.",
        markdown_table(
            "store | all calls | ÷ memory | commit per save | prepare per call | save ÷ prepare "
            "(memory)",
            rows,
            "lrrrrr",
        ),
        f"Incremental writes: a save wrote a median of {data['bytes_per_save_median']:,.0f} "
        f"bytes of JSON; the final state is {data['state_bytes_final']:,} bytes in "
        f"{data['entries_final']} entries; all {data['saves']['sqlite']} saves together wrote "
        f"{data['bytes_written_total']:,} bytes.",
    ]
    if data["notes"]:
        md += ["", *[f"_{n}_" for n in data["notes"]]]
    md += [
        "Reproduce: `.venv/bin/python -m benchmarks run percall --variant state` (`--quick`: "
        "160 messages, one run; tests: `.venv/bin/pytest tests/state`)",
    ]
    return "\n\n".join(md)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "smallest trace / 160 messages, once")
    ap.add_argument("--state", action="store_true", help="the state stores' saves")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else max(1, args.repeat)
    if not args.state:
        try:
            import langchain  # noqa: F401
        except ImportError:
            eprint("LangChain is not installed: pip install -e '.[langchain]'")
            return 2
    data = (state if args.state else floors)(args.quick, repeat) | {"quick": args.quick}
    md = (state_markdown if args.state else floors_markdown)(data)
    publish("bench_state" if args.state else "bench_floors", data, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
