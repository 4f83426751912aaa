"""Same output as another source tree: every shared trace, byte for byte.

    python -m benchmarks.peers.same_output --baseline /path/to/main [--agent coding_agent]

Replays every trace of ../shared/traces under the policy at 16k and 32k tokens in
two worker processes — this tree's ctxpolicy and the baseline's
(:mod:`benchmarks.peers.worker`) — and compares, call by call, the SHA-256 of every
text ``add_tool_result`` returned and of every list ``prepare`` returned. Exit
status 1 on the first difference (trace, window, call index); a performance change
must keep this at 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks._common import SHARED, eprint
from benchmarks.peers.worker import ROOT, Worker


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="source tree to compare with")
    ap.add_argument("--agent", default="coding_agent")
    ap.add_argument("--windows", default="16384,32768")
    ap.add_argument("--traces", type=int, default=0, help="only the N smallest traces (0: all)")
    args = ap.parse_args(argv)
    traces = sorted((SHARED / "traces").glob("*.jsonl"))
    if args.traces:
        traces = sorted(traces, key=lambda p: p.stat().st_size)[: args.traces]
    if not traces:
        eprint(f"no traces under {SHARED / 'traces'}")
        return 2
    ours, theirs = Worker(ROOT), Worker(Path(args.baseline))
    calls = differ = 0
    try:
        for trace in traces:
            for window in (int(w) for w in args.windows.split(",")):
                req = {"cmd": "prepared", "trace": str(trace), "agent": args.agent}
                a = ours.ask(**req, window=window)["digests"]
                b = theirs.ask(**req, window=window)["digests"]
                calls += len(a)
                if a != b:
                    differ += 1
                    first = next(
                        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                        min(len(a), len(b)),
                    )
                    eprint(
                        f"DIFFERENT {trace.name} @ {window}: call {first} ({len(a)} vs {len(b)})"
                    )
    finally:
        ours.close()
        theirs.close()
    print(
        f"{len(traces)} traces × {args.windows}: {calls} outputs compared, "
        f"{differ} runs differ (baseline {args.baseline})"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
