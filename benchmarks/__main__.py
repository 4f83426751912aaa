"""``python -m benchmarks list | run SUITE [--variant V] [--quick] | render``.

``run`` starts each variant of the suite in its own interpreter (``benchmarks/<script>.py``
with the variant's arguments, then ``--quick`` and any further arguments), results into
``benchmarks/results`` (``--results DIR``: elsewhere). ``run all`` runs every suite's
default variants. ``render`` builds docs/benchmarks.md from the results files alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.suites import SUITES, Variant, suite  # noqa: E402


def _list() -> int:
    for s in SUITES:
        print(f"{s.name:<14} {s.about}")
        if len(s.variants) > 1:
            for v in s.variants:
                extra = "" if v.default else " (only with --variant)"
                print(f"  --variant {v.name:<10} {v.about} → results/{v.results}{extra}")
    return 0


def _run(
    names: list[str], variants: str, quick: bool, results: Path | None, extra: list[str]
) -> int:
    chosen: list[Variant] = []
    for name in names:
        try:
            s = suite(name)
        except KeyError:
            print(f"unknown suite {name!r} (python -m benchmarks list)", file=sys.stderr)
            return 2
        wanted = [w for w in variants.split(",") if w]
        try:
            chosen += [s.variant(w) for w in wanted] or [v for v in s.variants if v.default]
        except KeyError as exc:
            print(exc.args[0], file=sys.stderr)
            return 2
    env = dict(os.environ)
    # `benchmarks` importable in every script (after any tree the caller put first)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(HERE.parent)]))
    if results is not None:
        env["CTXPOLICY_BENCH_RESULTS"] = str(results.resolve())
    for v in chosen:
        if quick and not v.quick:
            print(f"== {v.script}: no --quick mode, skipped", file=sys.stderr)
            continue
        cmd = [sys.executable, str(HERE / f"{v.script}.py"), *v.args]
        cmd += ["--quick"] if quick else []
        cmd += extra
        print(f"== {v.results}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        rc = subprocess.run(cmd, cwd=HERE.parent, env=env).returncode
        if rc != 0:
            return rc
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered suites and their variants")
    run = sub.add_parser("run", help="run a suite (or 'all'); unknown options go to the scripts")
    run.add_argument("suite", nargs="+", help="suite name(s), or all")
    run.add_argument("--variant", default="", help="comma-separated variants (default: all)")
    run.add_argument("--quick", action="store_true", help="smoke-test size")
    run.add_argument("--results", type=Path, help="results folder (default benchmarks/results)")
    sub.add_parser("render", help="build docs/benchmarks.md from the results files (--help)")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["render"]:
        from benchmarks import report

        return report.main(argv[1:])
    args, extra = ap.parse_known_args(argv)
    if args.command == "list":
        return _list()
    names = [s.name for s in SUITES] if args.suite == ["all"] else args.suite
    return _run(names, args.variant, args.quick, args.results, extra)


if __name__ == "__main__":
    raise SystemExit(main())
