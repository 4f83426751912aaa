"""Build resolved policies in code for engine tests (the file loader has its own tests)."""

from __future__ import annotations

from typing import Any

from ctxpolicy.policy.models import AgentPolicy, Policy
from ctxpolicy.testing.conversations import tool_call


def make_policy(tmp_path: Any = None, **overrides: Any) -> Policy:
    """A resolved Policy from AgentPolicy defaults plus ``overrides`` (plain data)."""
    base = AgentPolicy().model_dump(mode="json", exclude={"extends", "model"})
    base.update(
        agent="test",
        model={"context_window": 8000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"},
        on_overflow={
            "layer": "emergency",
            "at": "warning",
            "options": {"keep_recent_rounds": 2, "retries": 1},
        },
        tools={"*": {"preprocess": "head_tail", "options": {"max_chars": 2000}}},
    )
    if tmp_path is not None:
        base["snapshots"] = {**base["snapshots"], "path": str(tmp_path / "snaps")}
    else:
        base["snapshots"] = {**base["snapshots"], "enabled": False}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict) and key not in ("tools",):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return Policy.model_validate(base)


def call(cid: str, name: str = "read_file", **args: Any) -> dict[str, Any]:
    return tool_call(cid, name, args, sort_keys=False)


def conversation(
    rounds: int, result_chars: int = 2000, *, parallel: int = 1
) -> list[dict[str, Any]]:
    """system + task + ``rounds`` assistant steps with results + a last user turn."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a test agent."},
        {"role": "user", "content": "Task: inspect src/app.py and fix BUG-1234."},
    ]
    for r in range(rounds):
        calls = [call(f"c{r}_{p}", path=f"src/file_{r}_{p}.py") for p in range(parallel)]
        msgs.append({"role": "assistant", "content": f"round {r}", "tool_calls": calls})
        for c in calls:
            body = (f"line {c['id']} " * (result_chars // 10 + 1))[:result_chars]
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": body})
    msgs.append({"role": "user", "content": "continue"})
    return msgs


def apply_changes(state: Any, stored: dict[str, Any]) -> None:
    """Apply a ``SessionState``'s incremental changes to ``stored``, as a store's commit
    would (the entries put, the deleted ones removed)."""
    put, deleted = state.take_changes()
    stored.update(put)
    for key in deleted:
        stored.pop(key, None)
