"""Snapshot store and history archive: durability cost, archive growth, naming, recall.

Each measurement a ratio against a baseline measured in the same run (the section's
headings say which); with ``--baseline DIR`` also ``add_tool_result`` per call of that
tree and this one, each in its own child process.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import ROOT, eprint, in_tree, machine, markdown_table, parser, publish
from benchmarks._measure import answer, medians, rounds
from ctxpolicy.engine import Session
from ctxpolicy.policy.models import AgentPolicy, Policy
from ctxpolicy.state.memory import MemoryStateStore


def _policy(root: str | None, durability: str = "flush") -> Policy:
    base = AgentPolicy().model_dump(mode="json", exclude={"extends", "model"})
    base.update(
        agent="bench",
        model={"context_window": 128000, "max_output_tokens": 4096, "tokenizer": "cl100k_base"},
        on_overflow={"layer": "emergency", "at": "warning", "options": {}},
        tools={"*": {"preprocess": "head_tail", "options": {"max_chars": 2000}}},
    )
    snaps = dict(base["snapshots"])
    if root is None:
        snaps["enabled"] = False
    else:
        snaps.update(path=root, options={"durability": durability})
    base["snapshots"] = snaps
    return Policy.model_validate(base)


def _output(rng: random.Random, i: int) -> str:
    lines = [
        f"{i:05d} src/mod_{rng.randint(0, 99)}.py:{n}: value = {rng.random():.6f}"
        for n in range(150)
    ]
    return "\n".join(lines)[:8192]


# --------------------------------------------------------------------------- 1 durability


def add_tool_results(policy: Policy, outputs: list[str], conv_id: str) -> float:
    """Seconds per ``add_tool_result`` of ``outputs`` on a fresh session (after one)."""
    s = Session(policy, conv_id=conv_id, state_store=MemoryStateStore())
    s.add_tool_result({"name": "warm", "id": "w"}, outputs[0])
    t0 = time.perf_counter()
    for i, out in enumerate(outputs):
        s.add_tool_result({"name": "read_file", "id": f"c{i}"}, out)
    return (time.perf_counter() - t0) / len(outputs)


def bench_durability(calls: int, repeats: int) -> dict[str, Any]:
    rng = random.Random(1)
    outputs = [_output(rng, i) for i in range(calls)]

    def one(durability: str) -> float:
        with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
            off = durability == "none"
            policy = _policy(None if off else tmp, "flush" if off else durability)
            return add_tool_results(policy, outputs, "d")

    variants = {v: functools.partial(one, v) for v in ("none", "flush", "fsync")}
    med = medians(rounds(variants, repeats, alternate=True))
    out = {"calls": calls, "repeats": repeats, "median_ms": {v: m * 1000 for v, m in med.items()}}
    out |= {"fsync_over_flush": med["fsync"] / med["flush"]}
    return out | {f"{v}_over_none": med[v] / med["none"] for v in ("flush", "fsync")}


# --------------------------------------------------------------------------- 2 archive growth


def _synthetic_run(steps: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """(step, messages dropped at that step's compaction): a compaction every other
    step archives the two oldest rounds, like the issue's 486 compactions / 1,000 steps."""
    rng = random.Random(7)
    rounds: list[list[dict[str, Any]]] = []
    out: list[tuple[int, list[dict[str, Any]]]] = []
    for step in range(1, steps + 1):
        cid = f"call_{step}"
        fn = {"name": "read_file", "arguments": json.dumps({"path": f"src/m{step}.py"})}
        call = {"id": cid, "type": "function", "function": fn}
        text = f"Step {step}: next I read the module."
        rounds.append([{"role": "assistant", "content": text, "tool_calls": [call]}])
        out_text = _output(rng, step)[: rng.randint(500, 5000)]
        rounds[-1].append({"role": "tool", "tool_call_id": cid, "content": out_text})
        if step % 2 == 0 and len(rounds) > 4:
            out.append((step, [m for r in rounds[:2] for m in r]))
            rounds = rounds[2:]
    return out


def _store(root: str | Path, **options: Any) -> Any:
    """A local snapshot store under ``root`` that never prunes."""
    from ctxpolicy.snapshots import LocalOptions, LocalStore

    return LocalStore(LocalOptions(max_total_mb=None, max_age_days=None, **options), root=str(root))


def bench_archive(steps: int) -> dict[str, Any]:
    from ctxpolicy.snapshots.archive import HistoryArchive, render_transcript

    run = _synthetic_run(steps)
    dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"))
    content = sum(len(dumps(m).encode()) for _, msgs in run for m in msgs)
    results: dict[str, Any] = {"steps": steps, "compactions": len(run), "content_bytes": content}
    for variant in ("before", "after"):
        # before: one file per document, as the previous engine wrote them
        with tempfile.TemporaryDirectory(prefix="bench-archive-") as tmp:
            store = _store(tmp, layout="files" if variant == "before" else "auto")
            archive = HistoryArchive(store, "run")
            kept: list[dict[str, Any]] = []
            times: list[float] = []
            written: list[int] = []
            for step, msgs in run:
                t0 = time.perf_counter()
                if variant == "after":
                    archive.append(msgs, step=step)
                    times.append(time.perf_counter() - t0)
                    continue
                kept.extend(msgs)  # the previous engine's _archive_dropped
                doc = {"step": step, "action": "compacted_history", "phase": "compaction",
                       "observation": render_transcript([(i, step, m) for i, m in enumerate(kept, 1)]),
                       "messages": list(kept), "timestamp": time.time(), "conv_id": "run"}  # fmt: skip
                path = Path(store.write("run", step, "compacted_history", doc).path)
                times.append(time.perf_counter() - t0)
                # the old engine kept every one of these files; count them, then remove
                # them to spare the shared disk (GBs at 1,000 steps)
                written.append(path.stat().st_size)
                path.unlink()
            if variant == "before":
                size, files = sum(written), len(written)
            else:
                kept_files = [f for f in Path(tmp).rglob("*") if f.is_file()]
                kept_files = [f for f in kept_files if not f.name.startswith(".ctxpolicy")]
                size, files = sum(f.stat().st_size for f in kept_files), len(kept_files)
            tenth = max(1, len(times) // 10)
            growth = sum(times[-tenth:]) / max(sum(times[:tenth]), 1e-9)
            results[variant] = {"bytes": size, "files": files, "bytes_over_content": size / content}
            results[variant] |= {"last_tenth_over_first_tenth": growth, "total_s": sum(times)}
    return results


# --------------------------------------------------------------------------- 3 naming


def bench_naming() -> dict[str, Any]:
    """``os.link`` + ``os.open`` calls of 100 and 1,000 snapshots of one name."""
    ops: dict[int, int] = {}
    with (
        mock.patch("os.link", wraps=os.link) as link,
        mock.patch("os.open", wraps=os.open) as open_,
    ):
        for n in (100, 1000):
            with tempfile.TemporaryDirectory(prefix="bench-names-") as tmp:
                store = _store(tmp, layout="files")  # the layout that names by link
                before = link.call_count + open_.call_count
                for _ in range(n):
                    store.write("c", 3, "bash", {"observation": "x"})
                ops[n] = link.call_count + open_.call_count - before
    old = {n: n * (n + 1) // 2 + n for n in ops}  # linear probing: 1 + 2 + … + n links, n opens
    return {
        "ops": ops,
        "ratio": ops[1000] / ops[100],
        "previous_ops": old,
        "previous_ratio": old[1000] / old[100],
    }


# --------------------------------------------------------------------------- 4 recall


def bench_recall(small: int, factor: int) -> dict[str, Any]:
    from ctxpolicy.snapshots.archive import HistoryArchive

    sizes = (small, small * factor)
    with contextlib.ExitStack() as stack:
        stores = []
        for records in sizes:
            store = _store(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-recall-")))
            archive = HistoryArchive(store, "c")
            msg = {"role": "tool", "tool_call_id": "x", "content": "y" * 2000}
            for step in range(records):
                archive.append([msg, msg], step=step)
            stores.append((store, len(archive) // 2))
        best = [float("inf")] * len(sizes)
        for _ in range(15):  # interleaved, best of 15 (a shared, noisy machine)
            for k, (store, n) in enumerate(stores):
                fresh = HistoryArchive(store, "c")
                fresh.message(1)  # open (reads the index size once)
                t0 = time.perf_counter()
                for _ in range(50):
                    fresh.message(n)
                best[k] = min(best[k], (time.perf_counter() - t0) / 50)
    return {
        "records": list(sizes),
        "seconds": {str(sz): t for sz, t in zip(sizes, best, strict=True)},
        "ratio": best[1] / best[0],
    }


# --------------------------------------------------------------------------- 5 append


def _tool_document(rng: random.Random, i: int) -> dict[str, Any]:
    """A document as ``add_tool_result`` builds it (tool_results._snapshot)."""
    return {
        "step": i,
        "action": "read_file",
        "phase": None,
        "action_intention": None,
        "action_reason": None,
        "thought": None,
        "action_input": {"path": f"src/m{i}.py"},
        "observation": _output(rng, i),
        "timestamp": "2026-12-05T21:00:00.000+00:00",
        "conv_id": "bench",
        "tool_call_id": f"call_{i}",
    }


def _per_write(write: Any, items: list[Any]) -> float:
    """Seconds per ``write(i, item)``."""
    t0 = time.perf_counter()
    for i, item in enumerate(items):
        write(i, item)
    return (time.perf_counter() - t0) / len(items)


def bench_append(writes: int, repeats: int) -> dict[str, Any]:
    """Snapshot write ÷ bare append of the same bytes, per durability."""
    from ctxpolicy.snapshots import records

    rng = random.Random(3)
    docs = [_tool_document(rng, i) for i in range(writes)]
    out: dict[str, Any] = {"writes": writes, "repeats": repeats}
    for durability in ("flush", "fsync"):
        n = writes if durability == "flush" else max(writes // 8, 20)
        # the same bytes: the records this store writes (nonce and names alike)
        datas = [
            records.record(b"\0" * 8, f"step_{i + 1:03d}_read_file", *records.encode(d))
            for i, d in enumerate(docs[:n])
        ]
        times: dict[str, list[float]] = {"bare": [], "snapshot": []}
        for r in range(repeats):
            with tempfile.TemporaryDirectory(prefix="bench-append-") as tmp:
                store = _store(os.path.join(tmp, "store"), durability=durability)
                store.write("bench", 0, "warm", docs[0])
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
                fd = os.open(os.path.join(tmp, "bare.log"), flags, 0o600)

                def bare(
                    i: int, data: bytes, fd: int = fd, sync: bool = durability == "fsync"
                ) -> None:
                    os.write(fd, data)
                    if sync:
                        os.fsync(fd)

                def snapshot(i: int, doc: dict[str, Any], store: Any = store) -> None:
                    store.write("bench", i + 1, "read_file", doc)

                both: dict[str, tuple[Any, list[Any]]] = {
                    "bare": (bare, datas),
                    "snapshot": (snapshot, docs[:n]),
                }
                for k in list(both)[:: -1 if r % 2 else 1]:
                    times[k].append(_per_write(*both[k]))
                os.close(fd)
                store.close()
        ratios = [s / b for s, b in zip(times["snapshot"], times["bare"], strict=True)]
        med = medians(times, 1e6)
        out[durability] = {"writes": n, "record_bytes": sum(map(len, datas)) // n}
        out[durability] |= {"bare_us": med["bare"], "snapshot_us": med["snapshot"]}
        out[durability] |= {"ratio": statistics.median(ratios)}
    return out


def per_call_child(calls: int) -> float:
    """The measured tree's (``PYTHONPATH``) ``add_tool_result`` per call, ``flush``."""
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="bench-percall-") as tmp:
        return add_tool_results(_policy(tmp), [_output(rng, i) for i in range(calls)], "p")


def bench_per_call(baseline: str, calls: int, repeats: int) -> dict[str, Any]:
    """``add_tool_result`` per call, the baseline tree and this one in turn."""
    baseline = os.path.abspath(baseline)
    trees = {"before": Path(baseline), "after": ROOT}
    child = {
        k: functools.partial(in_tree, __file__, t, "--calls", str(calls)) for k, t in trees.items()
    }
    med = medians(rounds(child, repeats, alternate=True), 1e6)
    out = {"baseline": baseline, "calls": calls, "repeats": repeats}
    return out | {
        "before_us": med["before"],
        "after_us": med["after"],
        "ratio": med["after"] / med["before"],
    }


# --------------------------------------------------------------------------- report


def to_markdown(data: dict[str, Any]) -> str:
    d, a, n, r = data["durability"], data["archive"], data["naming"], data["recall"]
    ms, ops, old = d["median_ms"], n["ops"], n["previous_ops"]
    arch = ("bytes", "files", "bytes_over_content", "last_tenth_over_first_tenth")
    md = [
        "## Snapshot store and history archive",
        f"### `add_tool_result` per call by durability ({d['calls']} calls × {d['repeats']} "
        "interleaved repeats, 8 KB outputs)",
        markdown_table(
            "store | median ms / call | × snapshots off",
            [
                ["snapshots off (floor)", ms["none"], 1.0],
                ["local, `durability: flush` (default)", ms["flush"], d["flush_over_none"]],
                ["local, `durability: fsync`", ms["fsync"], d["fsync_over_none"]],
            ],
        ),
        f"`fsync` ÷ `flush`: **{d['fsync_over_flush']:.2f}×**.",
        f"### History archive over a {a['steps']:,}-step synthetic run ({a['compactions']} "
        f"compactions, {a['content_bytes'] / 1e6:.2f} MB of archived messages)",
        markdown_table(
            " | bytes written | files | bytes ÷ content | last 10 % ÷ first 10 % of compaction time",
            [
                ["before: whole archive rewritten per compaction", *(a["before"][k] for k in arch)],
                ["after: `HistoryArchive.append`", *(a["after"][k] for k in arch)],
            ],
        ),
        "### Snapshot naming, `layout: files` (one base name, counted `os.link` + `os.open` calls)",
        markdown_table(
            " | 100 snapshots | 1,000 snapshots | ratio",
            [
                ["now (counter + time suffix)", _at(ops, 100), _at(ops, 1000), n["ratio"]],
                ["previous linear probing (computed)", _at(old, 100), _at(old, 1000),
                 n["previous_ratio"]],
            ],
        ),
        f"### Recall of one archived message: archive of {r['records'][1]:,} vs "
        f"{r['records'][0]:,} records",
        f"Time ratio **{r['ratio']:.2f}** (O(message size): independent of the archive's size).",
    ]  # fmt: skip
    if ap_ := data.get("append"):
        cols = ("writes", "record_bytes", "bare_us", "snapshot_us", "ratio")
        rows = [
            [f"`{k}`", *(ap_[k][c] for c in cols), "✓" if ap_[k]["ratio"] <= 1.5 else "✗"]
            for k in ("flush", "fsync")
        ]
        md += [
            f"### One snapshot write ÷ a bare append of the same bytes ({ap_['repeats']} "
            "interleaved repeats, median)",
            markdown_table(
                "durability | writes | record bytes | bare append µs | snapshot write µs | "
                "ratio (median of repeats) | goal ≤ 1.5",
                rows,
            ),
        ]
    if pc := data.get("per_call"):
        md += [
            f"### `add_tool_result` per call: `{pc['baseline']}` → this tree ({pc['calls']} calls "
            f"× {pc['repeats']} runs in turn, child processes, `durability: flush`)",
            f"{pc['before_us']:.1f} µs → {pc['after_us']:.1f} µs (**{pc['ratio']:.2f}×**).",
        ]
    baseline_arg = f" --baseline {pc['baseline']}" if pc else ""
    quick = " --quick" if data["quick"] else ""
    md += [f"Reproduce: `.venv/bin/python benchmarks/bench_store.py{quick}{baseline_arg}`"]
    return "\n\n".join(md)


def _at(counts: dict[Any, int], n: int) -> int:
    """``counts[n]``, its key an int or (read from a results file) a string."""
    return counts[n] if n in counts else counts[str(n)]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, child=True)
    ap.add_argument(
        "--baseline", default=None, help="Another tree (e.g. a checkout of main) for 6."
    )
    ap.add_argument("--calls", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return answer(per_call_child(args.calls))
    t0 = time.perf_counter()
    # quick: a smoke run
    calls, repeats, steps = (20, 1, 20) if args.quick else (400, 5, 1000)
    eprint("append ...")
    append = bench_append(40 if args.quick else 1000, 1 if args.quick else 9)
    per_call = None
    if args.baseline:
        eprint("per call vs baseline ...")
        per_call = bench_per_call(args.baseline, calls, 3 if args.quick else 5)
    eprint("durability ...")
    durability = bench_durability(calls, repeats)
    eprint("archive ...")
    archive = bench_archive(steps)
    eprint("naming ...")
    naming = bench_naming()
    eprint("recall ...")
    rec = bench_recall(100, 10)
    data: dict[str, Any] = {"append": append, "per_call": per_call}
    data["machine"] = machine(["ctxpolicy", "tiktoken"])
    data |= {"quick": args.quick, "durability": durability, "archive": archive, "naming": naming}
    data |= {"recall": rec, "elapsed_s": time.perf_counter() - t0}
    publish("bench_store", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
