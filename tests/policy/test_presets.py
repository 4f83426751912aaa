"""The coding-client presets (policies/coding_clients.yaml): valid, their tools matched
under each client's own names, and a window that holds each client's fixed prefix."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxpolicy.budget import compute_budget
from ctxpolicy.engine.tool_results import select_rule
from ctxpolicy.resolve.load import load_policy, validate_file

PRESETS = Path(__file__).resolve().parents[2] / "policies" / "coding_clients.yaml"

#: each client's tool names as the model sees them → the rule they must get
CLIENT_TOOLS: dict[str, dict[str, str]] = {
    "claude_code": {
        "Bash": "bash",
        "Read": "read",
        "Edit": "edit",
        "MultiEdit": "edit",
        "Write": "edit",
        "Grep": "grep",
        "Glob": "glob",
        "LS": "glob",
        "WebFetch": "webfetch",
        "TodoWrite": "todowrite",
        "Task": "task",
    },
    "codex_cli": {
        "exec_command": "bash",
        "shell": "bash",
        "apply_patch": "edit",
        "update_plan": "todowrite",
        "read_file": "read",
        "view_image": "*",
    },
    "aider": {},
    "opencode": {
        "bash": "bash",
        "read": "read",
        "edit": "edit",
        "write": "edit",
        "grep": "grep",
        "glob": "glob",
        "list": "glob",
        "todowrite": "todowrite",
        "webfetch": "webfetch",
    },
}
#: fixed prefixes (system prompt + tool definitions) in tokens: Claude Code's as
#: measured from its requests (2.1.x, 24 tools); the others' are smaller, so it bounds them
PREFIX = {"claude_code": 18_400, "codex_cli": 18_400, "aider": 18_400, "opencode": 18_400}


def test_the_presets_validate_strictly() -> None:
    assert validate_file(PRESETS, env={}) == []


@pytest.mark.parametrize("agent", sorted(CLIENT_TOOLS))
def test_every_client_tool_gets_its_rule(agent: str) -> None:
    policy = load_policy(PRESETS, agent=agent, env={})
    for tool, rule in CLIENT_TOOLS[agent].items():
        found = select_rule(policy.tools, tool)
        assert found is not None and found[0] == rule, (agent, tool, found and found[0])


@pytest.mark.parametrize("agent", sorted(CLIENT_TOOLS))
def test_the_fixed_prefix_fits_well_below_the_target(agent: str) -> None:
    policy = load_policy(PRESETS, agent=agent, env={})
    b = compute_budget(policy)
    assert PREFIX[agent] < 0.3 * b.target, (agent, b.target)
    # layers run below the trigger, and compaction has somewhere to go
    assert b.target < b.warning_tokens < b.trigger
    for step in policy.pipeline:
        keep = step.options.get("min_keep_tokens")
        assert keep is None or keep < b.target
