"""Build resolved policies in code for engine tests (the file loader has its own tests)."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from ctxpolicy.conversation import Unit
from ctxpolicy.engine import economics
from ctxpolicy.plugins import hookimpl
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


def bare_policy(agent: str = "test", window: int = 120000, **sections: Any) -> Policy:
    """A resolved Policy with every section empty (the models' defaults) but the agent's
    name, the model's ``window`` and the emergency overflow layer; ``sections`` replace
    whole sections."""
    data: dict[str, Any] = {
        "agent": agent,
        "model": {"context_window": window},
        "budget": {},
        "thresholds": {},
        "pipeline": [],
        "on_overflow": {"layer": "emergency"},
        "tools": {},
        "snapshots": {},
        "pinned": {},
        "ledger": {},
        "constraints": [],
        "cache": {},
    }
    data.update(sections)
    return Policy.model_validate(data)


def plugin_module(
    name: str, *classes: type, hook: str = "ctxpolicy_register_layers"
) -> types.ModuleType:
    """A plugin module named ``name`` whose ``hook`` registers ``classes`` (layers by
    default), for ``plugins.register_plugin``."""
    mod = types.ModuleType(name)

    def register_all(register: Any) -> None:
        for c in classes:
            register(c)

    setattr(mod, hook, hookimpl(register_all))
    return mod


def pad_first_step(units: Sequence[Unit], words: int) -> list[Unit]:
    """``units`` with ``words`` more words in the first message of the first step (what
    a test layer that grows the context returns)."""
    out = list(units)
    i = next(i for i, u in enumerate(out) if u.kind == "step")
    msg = dict(out[i].messages[0])
    msg["content"] = (msg.get("content") or "") + " padding" * words
    out[i] = out[i].replace(messages=(msg, *out[i].messages[1:]))
    return out


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


@contextlib.contextmanager
def cache_alone() -> Iterator[None]:
    """Compactions the request does not need yet weighed by the cache alone, as before
    the price of the facts they take (``economics.OPTIONAL_SHARE`` 0): for tests of
    another rule that needs a compaction on a small conversation that fits."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(economics, "OPTIONAL_SHARE", 0.0)
        yield
