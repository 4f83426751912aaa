"""Validator: cold-process time of ``ctxpolicy validate`` vs ``check-jsonschema``, and warm
throughput on 1,000 generated policy files.

Cold: a new process per run, interleaved, median of ``--runs``; warm: one process over
``--files`` generated policies. The section says what each row runs.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import ROOT, eprint, machine, markdown_table, parser, publish
from benchmarks._measure import rounds

BIN = Path(sys.executable).parent
SCHEMA = ROOT / "schemas" / "ctxpolicy.schema.json"
PACKAGES = ("ctxpolicy", "check-jsonschema", "jsonschema", "ruamel.yaml", "pydantic", "click")


def tool(name: str) -> str | None:
    p = BIN / name
    return str(p) if p.exists() else shutil.which(name)


def generated_policy(i: int, rng: random.Random) -> str:
    window = rng.choice([16384, 32768, 65536, 128000, 200000])
    reserve = rng.choice([1024, 2048, 4096])
    growth = rng.choice([0, 1000, 2000])
    margin = rng.choice([500, 1000])
    target = rng.choice([0.5, 0.55, 0.6, 0.65])
    age = rng.randint(2, 8)
    keep = rng.randint(2, 5)
    return f"""# generated policy {i}
ctxpolicy: 1
models:
  model-{i}: {{context_window: {window}, max_output_tokens: {reserve}}}
policies:
  default:
    description: Generated policy number {i}.
    model: model-{i}
    budget:
      reserve_output: {reserve}
      tool_growth: {growth}
      safety_margin: {margin}
      target: {target}
    thresholds: {{warning: 0.70, error: 0.90, critical: 0.95}}
    pipeline:
      - {{layer: observation_mask, at: warning, options: {{max_age_rounds: {age}, max_chars: 200}}}}
      - {{layer: drop_rounds, at: warning, options: {{keep_recent_rounds: {keep}, min_keep_tokens: 100}}}}
      - {{layer: summarize, at: error, options: {{summarizer: extractive, max_failures: 3}}}}
    on_overflow: {{layer: emergency, options: {{keep_recent_rounds: 2, retries: 1}}}}
    tools:
      run_tests: {{preprocess: test_failures}}
      read_file: {{preprocess: head_tail_lines, options: {{lines: 50, min_lines: 200}}}}
      "*": {{preprocess: head_tail, options: {{max_chars: {rng.choice([2000, 3000, 4000])}}}}}
  agent_{i}:
    extends: default
    budget: {{target: 0.5}}
"""


#: Both tools run with bytecode caching on, in a private pycache prefix filled by the
#: untimed prewarm run: an installed tool has its .pyc files, and PYTHONDONTWRITEBYTECODE
#: in a dev shell would otherwise make the editable ctxpolicy recompile on every start.
PYCACHE = tempfile.mkdtemp(prefix="ctxpolicy-bench-pycache-")
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {
    "PYTHONPYCACHEPREFIX": PYCACHE
}


#: Commands (by key) run with another ctxpolicy source tree first on the path.
SOURCES: dict[str, str] = {}


def run(cmd: list[str], key: str = "") -> tuple[float, int, str]:
    env = ENV
    src = SOURCES.get(key)
    if src is not None:
        env = ENV | {"PYTHONPATH": os.pathsep.join(filter(None, [src, ENV.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, p.returncode, (p.stdout + p.stderr)[-400:]


def cold(cmds: dict[str, list[str]], runs: int, *, prewarm: bool = True) -> dict[str, Any]:
    for k, c in cmds.items() if prewarm else ():  # warm the OS file cache, not the measurement
        run(c, k)
    res = rounds({k: functools.partial(run, c, k) for k, c in cmds.items()}, runs)
    return {
        k: {
            "command": " ".join(Path(x).name if i == 0 else x for i, x in enumerate(c)),
            "median_s": statistics.median(t for t, _, _ in res[k]),
            "min_s": min(t for t, _, _ in res[k]),
            "runs": [t for t, _, _ in res[k]],
            "exit_code": res[k][-1][1],
            "output_tail": res[k][-1][2] if res[k][-1][1] else "",
        }
        for k, c in cmds.items()
    }


def paired_ratio(res: dict[str, Any], a: str, b: str) -> float:
    """Median over rounds of ``a``'s time ÷ ``b``'s time in the same round."""
    return statistics.median(x / y for x, y in zip(res[a]["runs"], res[b]["runs"], strict=True))


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "tiny run for the smoke test")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument(
        "--before",
        metavar="SRC",
        help="also time `ctxpolicy validate policies/agents.yaml` with the ctxpolicy package "
        "of SRC (e.g. `git archive <rev> ctxpolicy | tar -x -C SRC`): before/after in one run",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.files = 1, 3  # a smoke run
    ctx = tool("ctxpolicy")
    cj = tool("check-jsonschema")
    if ctx is None:
        eprint("ctxpolicy executable not found next to this interpreter")
        return 2
    info = machine(PACKAGES)
    yamls = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "policies").glob("*.yaml"))
    schema = str(SCHEMA.relative_to(ROOT))
    agents = "policies/agents.yaml"
    cmds: dict[str, list[str]] = {
        "ctxpolicy_agents": [ctx, "validate", agents],
        "ctxpolicy_yaml": [ctx, "validate", *yamls],
        "ctxpolicy_dir": [ctx, "validate", "policies/"],
    }
    if cj:
        cmds["check_jsonschema_agents"] = [cj, "--schemafile", schema, agents]
        cmds["check_jsonschema_yaml"] = [cj, "--schemafile", schema, *yamls]
    else:
        eprint("check-jsonschema not installed: `.venv/bin/pip install check-jsonschema`")
    if args.before:
        # the same console script, another source tree first on the path
        SOURCES["ctxpolicy_before"] = str(Path(args.before).resolve())
        cmds["ctxpolicy_before"] = [ctx, "validate", agents]
    if yamls == [agents]:  # one shipped YAML file: the second pair would repeat the first
        del cmds["ctxpolicy_yaml"]
        cmds.pop("check_jsonschema_yaml", None)
    eprint(f"cold runs ({args.runs} each) ...")
    cold_res = cold(cmds, args.runs, prewarm=not args.quick)
    eprint("warm throughput ...")
    tmp = Path(tempfile.mkdtemp(prefix="ctxpolicy-bench-validate-"))
    try:
        rng = random.Random(1234)
        files = [tmp / f"policy_{i:04d}.yaml" for i in range(args.files)]
        for i, p in enumerate(files):
            p.write_text(generated_policy(i, rng), encoding="utf-8")
        wcmds: dict[str, list[str]] = {"ctxpolicy": [ctx, "validate", str(tmp)]}
        if cj:
            wcmds["check_jsonschema"] = [cj, "--schemafile", str(SCHEMA), *map(str, files)]
        warm = cold(wcmds, 1 if args.quick else 3, prewarm=not args.quick)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(PYCACHE, ignore_errors=True)
    base = {"ctxpolicy": "ctxpolicy_agents", "check_jsonschema": "check_jsonschema_agents"}
    for k, w in warm.items():
        start = cold_res[base[k]]["median_s"]
        w["files"] = args.files
        w["files_per_s"] = args.files / w["median_s"]
        net = w["median_s"] - start
        w["files_per_s_net_of_start"] = args.files / net if net > 0.05 else None
    med = {k: r["median_s"] for k, r in cold_res.items()}
    ratio = ratio_all = paired = after_over_before = None
    if "check_jsonschema_agents" in med:
        ratio = ratio_all = med["ctxpolicy_agents"] / med["check_jsonschema_agents"]
        if "check_jsonschema_yaml" in med:
            ratio_all = med["ctxpolicy_yaml"] / med["check_jsonschema_yaml"]
        paired = paired_ratio(cold_res, "ctxpolicy_agents", "check_jsonschema_agents")
    if "ctxpolicy_before" in cold_res:
        after_over_before = paired_ratio(cold_res, "ctxpolicy_agents", "ctxpolicy_before")
    data = {
        "machine": info,
        "files": yamls,
        "after_over_before_paired": after_over_before,
        "runs": args.runs,
        "cold": cold_res,
        "warm": warm,
        "case": agents,
        "ctxpolicy_over_check_jsonschema_cold": ratio,
        "ctxpolicy_over_check_jsonschema_cold_paired": paired,
        "ctxpolicy_over_check_jsonschema_cold_all_yaml": ratio_all,
        "goal_cold_le_check_jsonschema": ratio is not None and ratio <= 1.0,
        "quick": args.quick,
        "bytecode": "PYTHONPYCACHEPREFIX (private, prewarmed); PYTHONDONTWRITEBYTECODE unset",
    }
    label = {
        "ctxpolicy_agents": f"`ctxpolicy validate {agents}`",
        "ctxpolicy_before": f"`ctxpolicy validate {agents}`, before (`--before {args.before}`)",
        "check_jsonschema_agents": f"`check-jsonschema --schemafile {schema} {agents}`",
        "ctxpolicy_yaml": "`ctxpolicy validate " + " ".join(yamls) + "`",
        "check_jsonschema_yaml": f"`check-jsonschema --schemafile {schema} {' '.join(yamls)}`",
        "ctxpolicy_dir": "`ctxpolicy validate policies/` (all shipped files, TOML and compat too)",
    }
    pair = {k: "yaml" if k.endswith(("_yaml", "_dir")) else "agents" for k in med}
    ref = {k: med.get(f"check_jsonschema_{pair[k]}") for k in med}
    both = ratio is not None and paired is not None
    got = f"{ratio:.2f}× (medians); {paired:.2f}× (median of per-round ratios)" if both else ""
    met = "✓" if data["goal_cold_le_check_jsonschema"] else "✗"
    goal = f"ctxpolicy cold ≤ check-jsonschema cold ({agents})"
    goals = [[goal, got or "check-jsonschema missing", met]]
    if after_over_before is not None:
        goal = "this version ÷ `--before` (median of per-round ratios)"
        goals.append([goal, f"{after_over_before:.2f}×", ""])
    if "check_jsonschema_yaml" in cold_res:
        all_yaml = f"{ratio_all:.2f}×" if ratio_all is not None else "n/a"
        met = "✓" if ratio_all is not None and ratio_all <= 1.0 else "✗"
        goals.append(["the same on every policies/*.yaml", all_yaml, met])
    vs = {k: r["median_s"] / ref[k] if ref[k] else "n/a" for k, r in cold_res.items()}
    cold_rows = [
        [label[k], r["median_s"], r["min_s"], vs[k], r["exit_code"]] for k, r in cold_res.items()
    ]
    cols = ("median_s", "files_per_s", "files_per_s_net_of_start", "exit_code")
    warm_rows = [[k, *(w[c] for c in cols)] for k, w in warm.items()]
    md = [
        "## Validator",
        f"Cold process time, median of {args.runs} interleaved runs, after one untimed run "
        "that fills a private bytecode cache for both tools (as installed tools have):",
        markdown_table("command | median s | min s | × check-jsonschema | exit", cold_rows),
        markdown_table("goal | measured | status", goals, align="llc"),
        f"Warm throughput: one process over {args.files:,} generated policy files "
        "(median of the runs; 'net' subtracts the cold start of the row above):",
        markdown_table("validator | seconds | files/s | files/s net of start | exit", warm_rows),
        "ctxpolicy additionally resolves `extends`, runs the semantic checks (budget "
        "arithmetic, thresholds order, unknown components with did-you-mean) and reports "
        "file:line:col for every diagnostic; check-jsonschema checks the schema only.",
        "Reproduce: `.venv/bin/python benchmarks/bench_validate.py"
        + "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv))
        + "`"
        + (
            " (`--before SRC`: the ctxpolicy package of an earlier commit, "
            "`git archive <rev> ctxpolicy | tar -x -C SRC`)"
            if args.before
            else ""
        ),
    ]
    text = "\n\n".join(md)
    publish("bench_validate", data, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
