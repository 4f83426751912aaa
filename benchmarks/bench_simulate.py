"""``ctxpolicy simulate --plot`` on three shared traces: the page's "Simulations" plots.

Runs the CLI per :data:`SIMULATIONS` (policy vs two baselines each), writes the PNGs to
docs/img (``--quick``: the smallest trace only, its PNG beside the results) and
benchmarks/results/bench_simulate.{json,md}: each plot and its totals.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks import _common
from benchmarks._common import ROOT, SHARED, eprint, parser, publish

#: (trace file, agent, window, baselines) of the plots.
SIMULATIONS = (
    ("mini-swe-agent__20251118_gemini-3-pro-74pct.sympy__sympy-13091.jsonl", "coding_agent", 32768,
     ("none", "observation_mask")),
    ("mini-swe-agent__20251118_gemini-3-pro-74pct.django__django-15629.jsonl", "coding_agent", 32768,
     ("none", "summary_at_fraction")),
    ("openhands__multi_swe_bench.output.ponylang__ponyc-4588.jsonl", "coding_agent_16k", 16384,
     ("none", "last_n")),
)  # fmt: skip
MAX_PNG = 200_000


def simulate(
    trace: str, agent: str, window: int, baselines: tuple[str, ...], img: Path
) -> dict[str, Any]:
    """One ``ctxpolicy simulate --plot --json`` run: its PNG and per-run totals."""
    tag = trace.removesuffix(".jsonl").rsplit(".", 1)[-1][:40]
    png = img / f"simulate_{agent}_{window}_{tag}.png".replace("/", "_")
    out: dict[str, Any] = {"trace": trace, "agent": agent, "window": window}
    out |= {"baselines": list(baselines), "png": png.name}
    path = SHARED / "traces" / trace
    if not path.exists():
        return {**out, "error": "trace not found"}
    cmd = [str(Path(sys.executable).parent / "ctxpolicy"), "simulate", str(path)]
    cmd += ["--policy", "policies/agents.yaml", "--agent", agent, "--window", str(window)]
    cmd += [*(a for b in baselines for a in ("--baseline", b)), "--plot", str(png), "--json"]
    eprint(f"simulate {trace} ({agent} @ {window}) ...")
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode not in (0, 1) or not png.exists():
        return {**out, "error": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}
    try:
        runs = json.loads(p.stdout).get("summary") or {}
        summary = {
            n: {"prompt_tokens": s["prompt_tokens"], "overflows": s["overflows"]}
            for n, s in runs.items()
        }
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        summary = {}
    return {**out, "png_bytes": png.stat().st_size, "summary": summary}


def to_markdown(data: dict[str, Any]) -> str:
    md = [
        "## Simulations",
        "Tokens sent per model call (policy vs baselines, with trigger, target and hard "
        "limit; markers where a layer fired):",
    ]
    for r in data["plots"]:
        trace, agent, window = r["trace"], r["agent"], r["window"]
        if r.get("error"):
            md += [f"_(simulate failed for {trace}: {r['error']})_", ""]
            continue
        shown = f"ctxpolicy simulate ../shared/traces/{trace} --policy policies/agents.yaml "
        shown += " ".join([f"--agent {agent}", f"--window {window}"])
        shown += (
            "".join(f" --baseline {b}" for b in r["baselines"]) + f" --plot docs/img/{r['png']}"
        )
        totals = "; ".join(
            f"{n}: {s['prompt_tokens']:,} prompt tokens, {s['overflows']} overflows"
            for n, s in r["summary"].items()
        )
        md += [
            f"![{agent} at {window:,} on {trace}](img/{r['png']})",
            f"`{shown}`"
            + (f" — {totals}" if totals else "")
            + ("" if r["png_bytes"] < MAX_PNG else f" (PNG {r['png_bytes']:,} bytes!)"),
        ]
    md.append("Reproduce: `python -m benchmarks run simulate`")
    return "\n\n".join(md)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "the smallest trace only")
    args = ap.parse_args(argv)
    img = _common.RESULTS / "img" if args.quick else ROOT / "docs" / "img"
    img.mkdir(parents=True, exist_ok=True)
    todo = SIMULATIONS[-1:] if args.quick else SIMULATIONS  # quick: the smallest trace
    data = {"quick": args.quick, "plots": [simulate(*s, img) for s in todo]}
    publish("bench_simulate", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
