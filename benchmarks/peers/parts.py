"""Where ctxpolicy's per-call time goes, unprofiled, and the floor of each part.

:func:`per_call_parts` replays a trace as :func:`benchmarks.peers.timing.replay_ctxpolicy`
does, with a clock around each part of the path (cProfile inflates the many small
Python calls; these are wall-clock medians per occurrence):

* ``add_tool_result`` — ``snapshot`` (the whole local write: document encoding,
  temp file, link to its name), ``preprocess`` (the tool's rule), ``count`` (every
  exact count of the session's counter, cache hits included), ``state save``
  (encoding the changed entries and the memory store's commit), ``events``;
* ``prepare`` — the same ``state save`` and ``events``; the rest of ``prepare``
  (grouping, counting, sticky decisions, layers) is its own row.

Beside them, measured alone on the same data in the same run, the floors an exact,
durable design cannot go below: one atomic file publish (``open`` + ``write`` +
``close`` + ``link`` + ``unlink`` of the same bytes, in the same directory), one
plain file creation, and one uncached exact tokenizer pass over the raw result.
"""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["part_samples", "parts_markdown", "per_call_parts", "summarize"]


@contextmanager
def _clocked(
    targets: Sequence[tuple[Any, str, str]], times: dict[str, list[float]]
) -> Iterator[None]:
    """Wrap ``owner.name`` with a clock booked under ``label`` (outermost call only)."""
    saved = []
    depth: dict[str, int] = {}
    for owner, name, label in targets:
        orig = getattr(owner, name)
        saved.append((owner, name, owner.__dict__.get(name)))

        def make(orig: Callable[..., Any], label: str) -> Callable[..., Any]:
            @functools.wraps(orig)
            def clocked(*a: Any, **k: Any) -> Any:
                if depth.get(label):
                    return orig(*a, **k)
                depth[label] = 1
                t0 = time.perf_counter()
                try:
                    return orig(*a, **k)
                finally:
                    times.setdefault(label, []).append(time.perf_counter() - t0)
                    depth[label] = 0

            return clocked

        setattr(owner, name, make(orig, label))
    try:
        yield
    finally:
        for owner, name, own in reversed(saved):
            if own is None:
                delattr(owner, name)  # it was inherited
            else:
                setattr(owner, name, own)


def _floors(
    docs: Sequence[bytes], texts: Sequence[str], tokenizer: Any, out: dict[str, list[float]]
) -> None:
    """Seconds of the bare operations on the trace's own data, added to ``out``."""
    tmp = Path(tempfile.mkdtemp(prefix="ctxpolicy-floor-"))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    clock = time.perf_counter
    try:
        for i, data in enumerate(docs):
            t0 = clock()
            fd = os.open(tmp / f".tmp-{i}", flags, 0o600)
            os.write(fd, data)
            os.close(fd)
            os.link(tmp / f".tmp-{i}", tmp / f"{i}.json")
            os.unlink(tmp / f".tmp-{i}")
            t1 = clock()
            fd = os.open(tmp / f"plain-{i}.json", flags, 0o600)
            os.write(fd, data)
            os.close(fd)
            t2 = clock()
            out["atomic file publish"].append(t1 - t0)
            out["file creation"].append(t2 - t1)
        for text in texts:
            t0 = clock()
            tokenizer.count(text)
            out["exact count"].append(clock() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def part_samples(policy: Any, msgs: Sequence[Mapping[str, Any]], repeat: int = 2) -> dict[str, Any]:
    """Seconds of every occurrence of each part, and of the floors, over ``repeat``
    replays (JSON-ready: a worker process returns it; :func:`summarize` reduces it)."""
    from benchmarks.peers.replay import replay_ctxpolicy
    from ctxpolicy.engine.persistence import Persistence
    from ctxpolicy.engine.session import Session
    from ctxpolicy.engine.tool_results import render_output
    from ctxpolicy.plugins import get_registry
    from ctxpolicy.snapshots import LocalStore, dump_document
    from ctxpolicy.state.sync import StateSync
    from ctxpolicy.tokens import get_counter

    counter = get_counter(policy.model, model_name=policy.model_name)
    times: dict[str, list[float]] = {}
    targets = [
        (Session, "prepare", "prepare (whole)"),
        (Session, "add_tool_result", "add_tool_result (whole)"),
        (LocalStore, "write", "snapshot"),
        (type(counter), "count_text", "count"),
        (Persistence, "changes", "state save"),
        (Session, "_emit", "events"),
    ]
    registry = get_registry()
    preprocessors = {registry.get("preprocessor", n) for n in registry.names("preprocessor")}
    targets += [(cls, "process", "preprocess") for cls in preprocessors if cls is not None]
    texts = [render_output(m.get("content"))[0] for m in msgs if m.get("role") == "tool"]
    docs = [dump_document({"observation": t, "step": i}) for i, t in enumerate(texts)]
    floors: dict[str, list[float]] = {
        "atomic file publish": [],
        "file creation": [],
        "exact count": [],
    }
    calls = 0
    for _ in range(repeat):  # the floors between the replays: the same load for both
        with _clocked([*targets, (StateSync, "save", "commit")], times):
            prep, _tools = replay_ctxpolicy(policy, msgs, state="memory")
        _floors(docs, texts, counter.tokenizer, floors)
        calls += len(prep)
    commits = times.pop("commit", [])
    times["state save"] = [
        a + b for a, b in zip(times.get("state save", []), commits, strict=False)
    ]
    return {"calls": calls, "tool_results": len(texts), "times": times, "floors": floors}


def summarize(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median µs of each part per occurrence and occurrences per model call, and the
    median floors, over the samples of one tree."""
    calls = sum(s["calls"] for s in samples)
    times: dict[str, list[float]] = {}
    floors: dict[str, list[float]] = {}
    for s in samples:
        for label, v in s["times"].items():
            times.setdefault(label, []).extend(v)
        for label, v in s["floors"].items():
            floors.setdefault(label, []).extend(v)
    return {
        "calls": calls // len(samples) if samples else 0,
        "tool_results": samples[0]["tool_results"] if samples else 0,
        "parts": {
            label: {
                "median_us": statistics.median(v) * 1e6 if v else 0.0,
                "per_call": len(v) / calls if calls else 0.0,
            }
            for label, v in times.items()
        },
        "floors_us": {k: statistics.median(v) * 1e6 if v else 0.0 for k, v in floors.items()},
    }


def per_call_parts(
    policy: Any, msgs: Sequence[Mapping[str, Any]], repeat: int = 2
) -> dict[str, Any]:
    """Median µs of each part per occurrence and per model call, and the floors."""
    return summarize([part_samples(policy, msgs, repeat)])


_ORDER = (
    "add_tool_result (whole)",
    "snapshot",
    "preprocess",
    "count",
    "state save",
    "events",
    "prepare (whole)",
)


def parts_markdown(
    label: str,
    data: Mapping[str, Any],
    langchain_ms: float | None = None,
    baseline: Mapping[str, Any] | None = None,
) -> list[str]:
    """The parts table (with ``baseline``, the baseline tree's medians of the same
    run beside them); with ``langchain_ms`` (LangChain's median per call on the same
    trace) a line puts the floors beside it."""
    from benchmarks._common import markdown_table

    def cell(now: float, before: float | None) -> str:
        return f"{before:.1f} → {now:.1f} ({now / before:.2f}×)" if before else f"{now:.1f}"

    parts = data["parts"]
    before_parts = (baseline or {}).get("parts", {})
    before_floors = (baseline or {}).get("floors_us", {})
    rows = [
        [k, cell(p["median_us"], before_parts.get(k, {}).get("median_us")), f"{p['per_call']:.2f}"]
        for k in _ORDER
        if (p := parts.get(k))
    ]
    rows += [
        [f"floor: {k}", cell(v, before_floors.get(k)), "—"] for k, v in data["floors_us"].items()
    ]
    head = "median µs" if baseline is None else "median µs, baseline → this tree"
    out = [
        f"#### Parts of the per-call path, unprofiled ({label})",
        "",
        "Median µs per occurrence (wall clock around each part; `count` includes cache "
        "hits, `state save` is encoding + the memory store's commit) and occurrences per "
        "model call; the floors are the bare operations on the trace's own tool results, "
        "measured between the replays of the same run (benchmarks/peers/parts.py)"
        + ("; both trees in turn, in their worker processes." if baseline else "."),
        "",
        markdown_table(["part", head, "per call"], rows),
        "",
    ]
    floors = data["floors_us"]
    if langchain_ms:
        lc = langchain_ms * 1000
        out += [
            f"LangChain's median per call on this trace: {lc:.1f} µs. One atomic snapshot "
            f"file alone is {floors['atomic file publish'] / lc:.2f}× that, one exact count "
            f"of a raw result {floors['exact count'] / lc:.2f}×, one `state save` (memory "
            f"store) {parts.get('state save', {}).get('median_us', 0.0) / lc:.2f}×.",
            "",
        ]
    return out
