"""Inputs of the engine benchmarks: the policy, the shared traces by size, synthetic
sessions, and the texts of a message (what one exact counting pass encodes)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, SHARED, shared_traces, trace_files

POLICY_FILE = ROOT / "policies" / "agents.yaml"
AGENT = "default"
Message = dict[str, Any]


def engine_policy() -> tuple[Any, str | None]:
    """The default policy; its tokenizer swapped for tiktoken cl100k when the policy's
    own cannot load offline (returns the note explaining the swap)."""
    import ctxpolicy
    from ctxpolicy.tokens import TokenCounter

    pol = ctxpolicy.load_policy(str(POLICY_FILE), agent=AGENT)
    try:
        c = TokenCounter(pol.model, model_name=pol.model_name)
        if c.name.startswith("tiktoken:"):
            return pol, None
        why = f"policy tokenizer resolved to {c.name}, not tiktoken"
    except Exception as exc:
        why = f"policy tokenizer unavailable offline ({type(exc).__name__}: {str(exc)[:160]})"
    model = pol.model.model_copy(update={"tokenizer": "cl100k_base"})
    return pol.model_copy(update={"model": model}), why + "; tiktoken cl100k_base used instead"


def tree_policies() -> Path:
    """The shipped policies of the tree ``ctxpolicy`` is imported from (a child of
    :func:`benchmarks._common.in_tree`: the tree it measures), not this folder's."""
    import ctxpolicy

    return Path(ctxpolicy.__file__).resolve().parents[1] / "policies" / "agents.yaml"


def family(trace: str) -> str:
    return trace.split("__", 1)[0]


def shipped_agents() -> list[str]:
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load(POLICY_FILE.read_text(encoding="utf-8"))
    return list(data["policies"])


def runnable(policy: Any) -> tuple[Any, str | None]:
    """``policy`` with a tokenizer chain that loads offline: an explicit bare tiktoken
    encoding that is not cached gets quicktok's identical bundled copy (then the
    heuristic) appended. Returns the note when it had to."""
    from ctxpolicy.tokens import TokenCounter

    try:
        TokenCounter(policy.model, model_name=policy.model_name)
        return policy, None
    except Exception as exc:
        tok = policy.model.tokenizer
        items = [tok] if isinstance(tok, str) else list(tok or [])
        bare = [i for i in items if i not in ("heuristic", "quicktok", "tiktoken")]
        encs = [i.split(":", 1)[-1] for i in bare]
        chain = [*items, *(f"quicktok:{e}" for e in encs), "heuristic"]
        model = policy.model.model_copy(update={"tokenizer": chain})
        return policy.model_copy(update={"model": model}), (
            f"{policy.agent}: tokenizer {tok!r} unavailable offline ({type(exc).__name__}); ran with {chain}"
        )


def matrix(windows: Sequence[int]) -> tuple[list[str], list[str], list[int]]:
    """A trace × policy × window suite's axes: the shared traces, every shipped agent and
    the ``windows``."""
    return shared_traces(), shipped_agents(), list(windows)


def load_agent(agent: str, policy_file: str | Path = POLICY_FILE) -> tuple[Any, str | None]:
    import ctxpolicy

    return runnable(ctxpolicy.load_policy(str(policy_file), agent=agent))


def message_texts(m: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    c = m.get("content")
    if isinstance(c, str):
        if c:
            out.append(c)
    elif isinstance(c, list):
        out += [str(p.get("text", "")) for p in c if isinstance(p, Mapping) and p.get("text")]
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function") or {}
        out += [str(fn.get("name", "")), str(fn.get("arguments", ""))]
    return out


def largest_traces(n: int) -> list[tuple[str, list[Message]]]:
    """The ``n`` traces of ../shared/traces with the most cl100k tokens, largest first."""
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.tokens import TiktokenTokenizer

    enc = TiktokenTokenizer.load("cl100k_base", None)
    sized: list[tuple[int, str, list[Message]]] = []
    for p in trace_files():
        msgs = load_trace(p)
        sized.append((sum(enc.count(t) for m in msgs for t in message_texts(m)), p.name, msgs))
    if not sized:
        raise FileNotFoundError(f"no traces under {SHARED / 'traces'} (set CTXPOLICY_SHARED)")
    sized.sort(key=lambda x: -x[0])
    return [(name, msgs) for _, name, msgs in sized[:n]]


def smallest_trace() -> tuple[str, list[Message]]:
    from ctxpolicy.sim.importers import load_trace

    first = trace_files(smallest=1)[0]
    return first.name, load_trace(first)


def coding_parts(
    parts: int, *, steps: int = 40, file_lines: int = 300, seed: int = 101
) -> list[Message]:
    """``parts`` synthetic ``coding_session`` runs back to back (one system prompt,
    tool-call ids kept unique): a long session of ordinary-size steps."""
    from ctxpolicy.sim.synth import coding_session

    out: list[Message] = []
    for part_no in range(parts):
        part = coding_session(seed=seed + part_no, steps=steps, file_lines=file_lines)
        if out:
            part = [m for m in part if m["role"] != "system"]
            for m in part:
                for tc in m.get("tool_calls") or []:
                    tc["id"] = f"{tc['id']}_{part_no}"
                if m["role"] == "tool":
                    m["tool_call_id"] = f"{m['tool_call_id']}_{part_no}"
        out.extend(part)
    return out


def step_indices(msgs: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices ``i`` of assistant messages with something before them: step = msgs[:i]."""
    return [i for i, m in enumerate(msgs) if m.get("role") == "assistant" and i > 0]


def tiny_session(n: int) -> list[dict[str, Any]]:
    """A system message, the task, then rounds of one ``bash`` call and its one-line
    result, ``n`` messages in all (one more when ``n`` would split a round)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in src/app.py"},
    ]
    i = 0
    while len(msgs) < n:
        fn = {"name": "bash", "arguments": json.dumps({"cmd": f"ls -l src/pkg_{i}"})}
        call = {"id": f"call_{i}", "type": "function", "function": fn}
        listing = f"-rw-r--r-- 1 dev dev {100 + i % 900} Jan 3 12:00 module_{i}.py"
        msgs.append(
            {"role": "assistant", "content": f"Looking at package {i}.", "tool_calls": [call]}
        )
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": listing})
        i += 1
    return msgs
