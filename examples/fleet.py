"""Two worker processes serve one conversation, sharing its state through a state store.

The shape of a web backend with several workers (or a job queue): every request for
a conversation may land on another worker, and each request builds a fresh
``Session(policy, conv_id=...)`` (here through the OpenAI adapter, ``wrap(client,
policy, conv_id=...)``). The session loads the conversation's state — compaction
decisions and their summaries, the ledger, learned numbers — from the store, so the
worker sends exactly what one long-lived process would have sent, and saves what it
changed with a compare-and-set commit.

Run it (it starts ctxpolicy's scripted OpenAI-compatible server and two workers)::

    python examples/fleet.py                      # state in a sqlite file (default)
    CTXPOLICY_STATE_DSN=postgresql://... python examples/fleet.py --store postgres

The conversation history itself is the application's (here a JSONL file the workers
share, standing in for your database); ctxpolicy keeps only its own state.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def scripted_model(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted server's model: read one engine file per turn."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ctxpolicy" / "engine").glob("*.py"))
    turn = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
    return {"tool_calls": [{"name": "read_file", "arguments": {"path": files[turn % len(files)]}}]}


def read_file(path: str) -> str:
    target = (ROOT / path).resolve()
    if ROOT not in target.parents or not target.is_file():
        return f"Error: {path} is not a file of the repository"
    return target.read_text(encoding="utf-8")


def load_history(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def handle_turn(config: dict[str, Any]) -> dict[str, Any]:
    """One request: load the history, call the model through ctxpolicy, run the tool."""
    import openai

    import ctxpolicy
    from ctxpolicy.integrations.openai import wrap

    policy = ctxpolicy.load_policy(config["policy"], agent=config["agent"])
    history_file = Path(config["history"])
    history = load_history(history_file)
    client = wrap(
        openai.OpenAI(base_url=config["base_url"], api_key="not-needed", max_retries=0),
        policy,
        conv_id=config["conv_id"],
    )
    session = client.session
    resumed = [e["version"] for e in session.events if e["type"] == "state.resumed"]
    resp = client.chat.completions.create(model="scripted-model", messages=history, tools=TOOLS)
    msg = resp.choices[0].message
    new = [msg.model_dump(exclude_none=True)]
    for call in msg.tool_calls or []:
        output = read_file(json.loads(call.function.arguments or "{}").get("path", ""))
        new.append(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": session.add_tool_result(call, output),
            }
        )
    with history_file.open("a", encoding="utf-8") as fh:
        for m in new:
            fh.write(json.dumps(m, ensure_ascii=False) + "\n")
    status = session.status or {}
    session.close()
    return {
        "worker": os.getpid(),
        "resumed_version": resumed[0] if resumed else 0,
        "used": status.get("used"),
        "compact_layer": status.get("compact_layer"),
        "compactions": sum(session.stats.compactions.values()),
        "prepares": session.stats.prepares,
    }


def worker(jobs: Any, results: Any) -> None:
    for config in iter(jobs.get, None):
        results.put(handle_turn(config))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=16)
    ap.add_argument("--store", default="sqlite", help="state store: sqlite (default), postgres")
    ap.add_argument("--window", type=int, default=12000, help="window of the scripted server")
    ap.add_argument("--workers", type=int, default=2, choices=(1, 2))
    ap.add_argument("--workdir", help="where the history, snapshots and state go (default: temp)")
    ap.add_argument("--json", action="store_true", help="print the turns as JSON")
    args = ap.parse_args(argv)

    from ctxpolicy.testing.server import ScriptedLLMServer

    work = Path(args.workdir or tempfile.mkdtemp(prefix="ctxpolicy-fleet-"))
    work.mkdir(parents=True, exist_ok=True)
    policy_file = work / "policy.yaml"
    policy_file.write_text(
        "ctxpolicy: 1\n"
        f"include: [{json.dumps(str(ROOT / 'policies' / 'agents.yaml'))}]\n"
        "policies:\n"
        "  fleet_agent:\n"
        "    extends: coding_agent\n"
        f"    model: {{context_window: {args.window}, tokenizer: cl100k_base}}\n"
        "    budget: {reserve_output: 1024, safety_margin: 256, tool_growth: 1024}\n"
        f"    snapshots: {{path: {json.dumps(str(work / 'snapshots'))}}}\n"
        f"    state: {{store: {args.store}}}\n",
        encoding="utf-8",
    )
    history = work / "history.jsonl"
    history.write_text(
        json.dumps({"role": "system", "content": "You are a coding agent."})
        + "\n"
        + json.dumps({"role": "user", "content": "Read the engine and explain it."})
        + "\n",
        encoding="utf-8",
    )
    ctx = multiprocessing.get_context("spawn")
    queues = [ctx.Queue() for _ in range(args.workers)]
    results = ctx.Queue()
    workers = [ctx.Process(target=worker, args=(q, results)) for q in queues]
    server = ScriptedLLMServer(window=args.window, script=scripted_model).start()
    turns: list[dict[str, Any]] = []
    try:
        for w in workers:
            w.start()
        config = {
            "policy": str(policy_file),
            "agent": "fleet_agent",
            "history": str(history),
            "conv_id": "fleet-conversation",
            "base_url": server.base_url,
        }
        for turn in range(args.turns):  # a conversation's turns are sequential
            queues[turn % len(queues)].put(config)  # ... but alternate between workers
            turns.append(results.get(timeout=300))
    finally:
        for q in queues:
            q.put(None)
        for w in workers:
            w.join(timeout=60)
        server.stop()
    sent = [hashlib.sha256(json.dumps(b["messages"]).encode()).hexdigest() for b in server.requests]
    if args.json:
        out = {"turns": turns, "requests": sent, "rejections": server.rejections}
        print(json.dumps(out))
    else:
        for i, t in enumerate(turns):
            print(
                f"turn {i:2d} on worker {t['worker']}: resumed state v{t['resumed_version']}, "
                f"sent {t['used']} tokens, layer {t['compact_layer']}"
            )
        print(f"{len(set(t['worker'] for t in turns))} workers, {server.rejections} rejections")
    return 0


if __name__ == "__main__":
    sys.exit(main())
