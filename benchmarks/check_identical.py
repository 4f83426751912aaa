"""Does ``prepare`` return byte-identical lists with two source trees?

Replays every trace of ../shared/traces (``--traces N``: the N smallest) under
``policies/agents.yaml`` (``--agent``, default coding_agent; ``all`` for every agent
the file defines) at 16k and 32k windows, the loop of ``ctxpolicy simulate``, once
with each tree (:func:`benchmarks._common.in_tree`), and compares the exact JSON text
of every prepared list (what ``add_tool_result`` returned included) call by call.
Exit status 0 when every list is identical, 1 otherwise (the first differences are
printed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import ROOT, in_tree, trace_files

WINDOWS = (16384, 32768)


def agents_of(name: str) -> list[str]:
    """``name``, or every agent of the shipped policy file for ``all``."""
    if name != "all":
        return [name]
    import yaml

    doc = yaml.safe_load((ROOT / "policies" / "agents.yaml").read_text(encoding="utf-8"))
    return sorted(doc["policies"])


def child(agent: str, traces: int = 0) -> dict[str, list[str]]:
    """Digest of the JSON text of every prepared list, per agent, trace and window (the
    ``traces`` smallest traces; 0: all)."""
    from ctxpolicy.sim import replay
    from ctxpolicy.sim.importers import load_trace

    out: dict[str, list[str]] = {}
    seen: list[str] = []
    original = replay.PolicyStrategy.prepare

    def prepare(self: Any, convo: list[Any]) -> Any:
        res = original(self, convo)
        text = json.dumps(res[0], ensure_ascii=False, sort_keys=False)
        seen.append(hashlib.blake2b(text.encode("utf-8", "surrogatepass")).hexdigest())
        return res

    replay.PolicyStrategy.prepare = prepare  # type: ignore[method-assign]
    try:
        for name in agents_of(agent):
            policy = replay.load_policy_file(str(ROOT / "policies" / "agents.yaml"), name)
            for path, window in ((p, w) for p in trace_files(traces) for w in WINDOWS):
                seen.clear()
                with tempfile.TemporaryDirectory(prefix="ctxpolicy-identical-") as tmp:
                    try:
                        msgs = load_trace(path)
                        replay.replay_trace(
                            msgs, policy, window=window, snapshots_dir=tmp, trace=path.stem
                        )
                    except Exception as exc:  # e.g. a budget that does not fit the window
                        seen.append(f"error: {type(exc).__name__}: {exc}"[:200])
                out[f"{name}:{path.stem}@{window}"] = list(seen)
    finally:
        replay.PolicyStrategy.prepare = original  # type: ignore[method-assign]
    return out


def run(src: Path, agent: str, traces: int = 0) -> dict[str, list[str]]:
    data: dict[str, list[str]] = in_tree(__file__, src, "--agent", agent, "--traces", str(traces))
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="the other source tree")
    ap.add_argument("--agent", default="coding_agent")
    ap.add_argument("--traces", type=int, default=0, help="only the N smallest traces (0: all)")
    ap.add_argument("--save", type=Path, help="write the baseline's digests here and stop")
    ap.add_argument("--against", type=Path, help="digests saved by --save, instead of a tree")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.agent, args.traces)))
        return 0
    if args.against is not None:
        base = json.loads(args.against.read_text())
        args.baseline = args.against
    elif args.baseline is None:
        ap.error("--baseline or --against is required")
    else:
        base = run(args.baseline.resolve(), args.agent, args.traces)
    if args.save is not None:
        args.save.write_text(json.dumps(base))
        print(f"{sum(map(len, base.values()))} prepared lists saved to {args.save}")
        return 0
    mine = run(ROOT, args.agent, args.traces)
    calls = sum(map(len, mine.values()))
    bad = [
        (k, i)
        for k in sorted(set(base) | set(mine))
        for i in range(max(len(base.get(k, [])), len(mine.get(k, []))))
        if base.get(k, [])[i : i + 1] != mine.get(k, [])[i : i + 1]
    ]
    for k, i in bad[:20]:
        print(f"DIFFERENT: {k} call {i}")
    print(
        f"{args.agent}: {len(mine)} replays (traces × windows {WINDOWS}), {calls} prepared "
        f"lists; {len(bad)} differ from {args.baseline}"
    )
    return 1 if bad or not calls else 0


if __name__ == "__main__":
    raise SystemExit(main())
