"""A plain, hand-written agent loop kept inside its context window by ctxpolicy.

No framework, only the ``openai`` SDK and four ctxpolicy calls:

* ``session.add_tool_result(call, output)`` — preprocess + snapshot every tool result;
* ``session.prepare(history, tools)`` — the budgeted messages to send this turn;
* ``session.on_error(exc, history, tools)`` — on a context-overflow error, the
  messages to retry with (``None`` if the error is something else);
* ``session.record_usage(prompt_tokens)`` — the provider's own count, for the events.

Run it against any OpenAI-compatible server (vLLM, Ollama, LiteLLM, OpenAI)::

    python examples/agent_loop.py --base-url http://localhost:8000/v1 --model my-model

or with no arguments: it starts ctxpolicy's scripted local server (a model with a
small window that asks to read ctxpolicy's own source files) and runs against it.

It runs from anywhere: the policy is ``policies/agents.yaml`` of the working directory
(``ctxpolicy init`` writes one), else the one of the clone this file is in; the files
the agent reads are those of the installed ``ctxpolicy`` package.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import openai

import ctxpolicy
from ctxpolicy.testing.server import ScriptedLLMServer

#: What the agent's tool may read: the directory holding the installed ``ctxpolicy``
#: package (a clone's root, or site-packages), whatever directory this file is run from.
ROOT = Path(ctxpolicy.__file__).resolve().parent.parent
#: The policy: the working directory's (``ctxpolicy init``), else the clone's.
POLICY_CANDIDATES = (
    Path("policies") / "agents.yaml",
    Path(__file__).resolve().parent.parent / "policies" / "agents.yaml",
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a source file of the ctxpolicy package.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path such as ctxpolicy/budget.py."}
                },
                "required": ["path"],
            },
        },
    }
]


def read_file(path: str) -> str:
    """The agent's only tool: read a file of the ctxpolicy package."""
    target = (ROOT / path).resolve()
    if ROOT / "ctxpolicy" not in target.parents or not target.is_file():
        return f"Error: {path} is not a file of the ctxpolicy package"
    return target.read_text(encoding="utf-8", errors="replace")


def scripted_model(steps: int):
    """What the scripted server answers: read one file per turn, then finish."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ctxpolicy").rglob("*.py"))

    turns = iter(range(10**9))

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        turn = next(turns)
        if turn >= steps:
            return {"content": "I have read the files I needed. Done."}
        return {
            "tool_calls": [{"name": "read_file", "arguments": {"path": files[turn % len(files)]}}]
        }

    return reply


def run(
    client: openai.OpenAI, model: str, session: ctxpolicy.Session, task: str, max_turns: int
) -> str:
    history: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": "You are a careful coding agent. Use read_file to inspect code.",
        },
        {"role": "user", "content": task},
    ]
    for turn in range(max_turns):
        messages = session.prepare(history, tools=TOOLS)
        while True:
            try:
                resp = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
                break
            except openai.BadRequestError as exc:
                retry = session.on_error(exc, history, tools=TOOLS)  # raises after `retries`
                if retry is None:
                    raise  # not a context overflow
                print(f"  turn {turn}: provider said the prompt was too long; retrying compacted")
                messages = retry
        if resp.usage is not None:
            session.record_usage(resp.usage.prompt_tokens)
        msg = resp.choices[0].message
        history.append(msg.model_dump(exclude_none=True))
        status = session.status or {}
        print(
            f"  turn {turn:2d}: sent {status.get('used')} tokens of {len(history)} messages "
            f"(state {status.get('state')}, layer {status.get('compact_layer')})"
        )
        if not msg.tool_calls:
            return msg.content or ""
        for call in msg.tool_calls:
            args = json.loads(call.function.arguments or "{}")
            output = read_file(str(args.get("path", "")))
            history.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": session.add_tool_result(call, output),
                }
            )
    return "(stopped: too many turns)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--base-url", help="OpenAI-compatible base URL (default: start the scripted local server)"
    )
    ap.add_argument("--model", default="scripted-model")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "not-needed"))
    ap.add_argument(
        "--policy",
        help="policy file (default: policies/agents.yaml here, written by `ctxpolicy init`)",
    )
    ap.add_argument("--agent", default="coding_agent")
    ap.add_argument("--steps", type=int, default=25, help="tool calls the scripted model makes")
    ap.add_argument(
        "--window",
        type=int,
        help="context window of the scripted server (default: 8000 tokens, or a quarter of "
        "the policy's window when that is above 64000)",
    )
    ap.add_argument(
        "--task", default="Read the engine and explain how a tool result enters the context."
    )
    args = ap.parse_args(argv)

    policy_path = args.policy or next((p for p in POLICY_CANDIDATES if p.is_file()), None)
    if policy_path is None:
        print("no policies/agents.yaml here: run `ctxpolicy init` first, or pass --policy")
        return 2
    policy = ctxpolicy.load_policy(policy_path, agent=args.agent)
    home = tempfile.mkdtemp(prefix="ctxpolicy-example-")
    # a new conversation each run: the same conv_id would resume the stored state
    session = ctxpolicy.Session(
        policy, conv_id=f"agent-loop-{os.getpid()}", env={**os.environ, "CTXPOLICY_HOME": home}
    )
    server = None
    base_url = args.base_url
    if base_url is None:
        claimed = policy.model.context_window
        window = args.window or (8000 if claimed <= 64000 else claimed // 4)
        server = ScriptedLLMServer(window=window, script=scripted_model(args.steps)).start()
        base_url = server.base_url
        print(f"scripted server on {base_url}: window {window} tokens (policy says {claimed})")
    try:
        client = openai.OpenAI(base_url=base_url, api_key=args.api_key, max_retries=0)
        answer = run(client, args.model, session, args.task, max_turns=args.steps + 5)
    finally:
        if server is not None:
            server.stop()
    print("answer:", answer)
    stats = session.stats.to_dict()
    print(
        f"prepares {stats['prepares']}, reactive retries {stats['reactive']}, "
        f"tool tokens {stats['tool_tokens_before']} -> {stats['tool_tokens_after']}, "
        f"compactions {stats['compactions']}"
    )
    if server is not None:
        print(f"server: {len(server.requests)} requests, {server.rejections} rejected as too long")
    print(f"window learned: {session.budget().window} tokens")
    print(f"snapshots under {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
