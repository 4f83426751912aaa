"""Helpers shared by the benchmark scripts: arguments, machine header, timing, tables,
results files, children measuring another tree, cProfile rows.

Benchmarks report ratios measured within one run (the machine is shared and noisy);
absolute times are printed for context only.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import platform
import pstats
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

#: where results files go (CTXPOLICY_BENCH_RESULTS: elsewhere, e.g. a smoke test's tmp dir)
RESULTS = Path(
    os.environ.get("CTXPOLICY_BENCH_RESULTS") or Path(__file__).resolve().parent / "results"
)
SHARED = Path(os.environ.get("CTXPOLICY_SHARED", Path(__file__).resolve().parents[2] / "shared"))
ROOT = Path(__file__).resolve().parents[1]


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine(packages: Iterable[str] = ()) -> dict[str, Any]:
    """Machine, interpreter and package versions, for the results header."""
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpus": os.cpu_count(),
        "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "versions": {p: _version(p) for p in packages},
    }


def timeit(
    fn: Callable[[], Any],
    *,
    repeat: int = 5,
    setup: Callable[[], Any] | None = None,
    warmup: int = 1,
) -> dict[str, float]:
    """Run ``fn`` ``repeat`` times (after ``warmup`` runs); ``setup`` runs before each,
    untimed. Returns median/min/max seconds and the runs."""
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    runs: list[float] = []
    for _ in range(max(1, repeat)):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return {
        "median": statistics.median(runs),
        "min": min(runs),
        "max": max(runs),
        "repeat": float(len(runs)),
        "runs": runs,  # type: ignore[dict-item]
    }


def markdown_table(
    headers: str | Sequence[str], rows: Iterable[Sequence[Any]], align: str = ""
) -> str:
    """A GitHub markdown table; ``headers`` a list or one string ``"a | b | c"``; ``align``
    is one of l/r/c per column (default: l then r)."""
    headers = headers.split(" | ") if isinstance(headers, str) else list(headers)
    if not align:
        align = "l" + "r" * (len(headers) - 1)
    sep = {"l": "---", "r": "---:", "c": ":---:"}
    lines = [
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join(sep[a] for a in align) + " |",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        if v == 0 or 0.01 <= abs(v) < 1e6:
            return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", "\\|")


def header_markdown(info: dict[str, Any]) -> str:
    vers = ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)
    return (
        f"_{info['date']} · Python {info['python']} ({info['implementation']}) · "
        f"{info['platform']} · {info['cpus']} CPUs · load {info.get('load_avg')} · {vers}_"
    )


def write_results(name: str, data: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    """Write ``results/<name>.json`` and ``results/<name>.md`` (the machine header,
    ``data["machine"]``, under the section's heading line)."""
    head = header_markdown(data["machine"]) if data.get("machine") else ""
    if head and head not in markdown:
        title, _, rest = markdown.partition("\n")
        markdown = f"{title}\n\n{head}\n\n{rest.lstrip(chr(10))}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    j = RESULTS / f"{name}.json"
    m = RESULTS / f"{name}.md"
    j.write_text(
        json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
    )
    m.write_text(markdown.rstrip() + "\n", encoding="utf-8")
    return j, m


def publish(name: str, data: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    """:func:`write_results`, the markdown printed, and where it went (stderr)."""
    paths = write_results(name, data, markdown)
    print(paths[1].read_text(encoding="utf-8"), end="")
    eprint(f"wrote {paths[0]} and {paths[1]}")
    return paths


def git_head(src: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def trees(baseline: Path | None, root: Path = ROOT) -> dict[str, Path]:
    """The source trees a before/after benchmark measures: ``baseline`` (when given),
    then this tree."""
    return {**({"baseline": baseline.resolve()} if baseline else {}), "this tree": root}


def baseline_info(baseline: Path | None) -> dict[str, Any]:
    """``baseline_src`` and ``baseline_commit`` of a before/after results file."""
    return {
        "baseline_src": str(baseline) if baseline else None,
        "baseline_commit": git_head(baseline) if baseline else None,
    }


#: A child measuring another tree: that tree's ``ctxpolicy`` (``PYTHONPATH``, first), this
#: tree's ``benchmarks`` whatever that tree holds; then the script as ``__main__``.
_CHILD = (
    "import runpy, sys, types; sys.path.append({root!r}); "
    "sys.modules.setdefault('benchmarks', types.ModuleType('benchmarks')).__path__ = [{here!r}]; "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def in_tree(
    script: str | Path, src: Path, *args: str, timeout: float | None = None, check: bool = True
) -> Any:
    """``script --child *args`` in a child interpreter whose ``PYTHONPATH`` is ``src`` (the
    tree measured, with this tree's benchmark code); the JSON of its last output line."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    code = _CHILD.format(root=str(ROOT), here=str(ROOT / "benchmarks"))
    cmd = [sys.executable, "-P", "-c", code, str(script), "--child", *args]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=check, timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"{Path(script).name} with {src} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def interleaved(
    script: str | Path, baseline: Path | None, repeat: int, *args: str
) -> dict[str, list[Any]]:
    """:func:`in_tree` ``repeat`` times per tree, baseline and this tree alternating."""
    codes = trees(baseline)
    runs: dict[str, list[Any]] = {c: [] for c in codes}
    for i in range(repeat):
        for code, src in codes.items():
            eprint(f"repeat {i + 1}/{repeat}: {code}")
            runs[code].append(in_tree(script, src, *args))
    return runs


def parser(
    doc: str | None,
    quick: str = "smoke-test size",
    *,
    baseline: bool = False,
    child: bool = False,
    jobs: bool = False,
) -> argparse.ArgumentParser:
    """A script's arguments parser, described by the first paragraph of ``doc``: ``--quick``;
    ``--baseline DIR`` (another source tree, measured in the same run) with ``baseline``;
    the hidden ``--child`` of :func:`in_tree`; ``--jobs N`` processes (2 at most)."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=quick)
    if baseline:
        ap.add_argument(
            "--baseline", type=Path, help="another source tree, measured in the same run"
        )
    if child:
        ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    if jobs:
        ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    return ap


#: ctxpolicy's scripted server answering ``argv[1]`` after ``argv[2]`` seconds; its URL
#: on stdout; it stops when its stdin closes
_UPSTREAM = """
import sys, time
from ctxpolicy.testing.server import ScriptedLLMServer
delay = float(sys.argv[2])
def script(body):
    if delay:
        time.sleep(delay)
    return {"content": sys.argv[1]}
with ScriptedLLMServer(window=1_000_000, script=script) as s:
    print(s.url, flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def scripted_upstream(content: str, delay: float = 0.0) -> Iterator[tuple[str, int]]:
    """A model-like upstream in a process of its own (its threads must not share the
    measuring process's interpreter lock): its URL and pid."""
    cmd = [sys.executable, "-c", _UPSTREAM, content, str(delay)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        yield proc.stdout.readline().strip(), proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def http_server(cmd: list[str], port: int, **popen: Any) -> Iterator[tuple[str, int]]:
    """``cmd`` (a server listening on ``port``) started, its URL once ``/healthz``
    answers, and its pid; terminated on exit."""
    import httpx

    proc = subprocess.Popen(cmd, **popen)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        # one client for every poll (a new one per poll loads certificates each time,
        # CPU taken from the server starting up)
        with httpx.Client(timeout=1) as poll:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if poll.get(url + "/healthz").is_success:
                        break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{' '.join(cmd[:4])} did not start")
                time.sleep(0.05)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def eprint(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def trace_files(smallest: int = 0) -> list[Path]:
    """The shared trace files (../shared/traces/*.jsonl) by name; ``smallest``: only
    that many of the smallest, smallest first."""
    files = sorted((SHARED / "traces").glob("*.jsonl"))
    return sorted(files, key=lambda p: p.stat().st_size)[:smallest] if smallest else files


def shared_traces() -> list[str]:
    """The shared trace files, sorted (none: said on stderr)."""
    traces = [str(p) for p in trace_files()]
    if not traces:
        eprint(f"no traces under {SHARED / 'traces'} (set CTXPOLICY_SHARED)")
    return traces


def run_jobs(calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]], jobs: int) -> list[Any]:
    """``fn(*args)`` of every ``(fn, args)`` in ``jobs`` processes (in this one when
    ``jobs`` ≤ 1), the results in the order of ``calls``; progress on stderr."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    t0 = time.perf_counter()
    if jobs <= 1:
        return [fn(*a) for fn, a in calls]
    out: list[Any] = [None] * len(calls)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(fn, *a): i for i, (fn, a) in enumerate(calls)}
        for n, f in enumerate(as_completed(futs)):
            out[futs[f]] = f.result()
            if (n + 1) % 20 == 0 or n + 1 == len(futs):
                eprint(f"  {n + 1}/{len(futs)} ({time.perf_counter() - t0:.0f} s)")
    return out


# --------------------------------------------------------------------------- profiles


def short_path(file: str) -> str:
    """``ctxpolicy/engine.py`` for a file of the package, ``pkg/mod.py`` for an installed
    one, ``built-in`` for C functions."""
    if file == "~":
        return "built-in"
    for marker in ("/ctxpolicy/", "/site-packages/"):
        if marker in file:
            tail = file.split(marker, 1)[1]
            return ("ctxpolicy/" if marker == "/ctxpolicy/" else "") + tail
    return Path(file).name if "/" in file else file


def function_name(key: tuple[str, int, str]) -> str:
    """``module:line(function)`` of a pstats key (the bare name of a C function)."""
    file, line, fn = key
    return fn if file == "~" else f"{short_path(file)}:{line}({fn})"


def profile_rows(prof: cProfile.Profile) -> tuple[float, list[dict[str, Any]]]:
    """Total own seconds and one row per profiled function (unsorted): ``function``,
    ``module``, ``calls``, ``tottime_s``, ``cumtime_s``, ``own_share``, ``cum_share``."""
    entries: Mapping[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values())
    rows = []
    for key, (_cc, nc, tt, ct, _callers) in entries.items():
        rows.append(
            {
                "function": function_name(key),
                "module": short_path(key[0]),
                "calls": nc,
                "tottime_s": tt,
                "cumtime_s": ct,
                "own_share": tt / total if total else 0.0,
                "cum_share": ct / total if total else 0.0,
            }
        )
    return total, rows
