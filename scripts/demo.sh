#!/usr/bin/env bash
# Last step of `make demo`: replay the example traces under the shipped 16k coding policy,
# print the summary table, write demo-report.html and demo-tokens.png.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
if [ ! -x "$BIN/ctxpolicy" ]; then
  echo "demo.sh: $BIN/ctxpolicy not found; run 'make demo' (it creates the venv)" >&2
  exit 2
fi
shopt -s nullglob
traces=(examples/traces/*.jsonl)
if [ ${#traces[@]} -eq 0 ]; then
  echo "demo.sh: no traces in examples/traces (regenerate: $BIN/python -m ctxpolicy.sim.synth)" >&2
  exit 2
fi
echo "== ctxpolicy simulate ${traces[*]}"
"$BIN/ctxpolicy" simulate "${traces[@]}" \
  --policy policies/agents.yaml --agent coding_agent_16k \
  --baseline none --baseline observation_mask --steps \
  --report demo-report.html --plot demo-tokens.png
