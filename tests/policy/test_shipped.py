"""The shipped policies in policies/: modelines, agents, comments, sane numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
AGENTS = [
    "default",
    "code_review_agent",
    "customer_service_agent",
    "data_analysis_agent",
    "coding_agent",
    "support_agent",
]


@pytest.mark.parametrize("name", ["agents.yaml", "agents.toml", "dbgpt.toml"])
def test_modeline_first(name: str) -> None:
    first = (POLICIES / name).read_text(encoding="utf-8").splitlines()[0]
    if name.endswith(".yaml"):
        assert first == "# yaml-language-server: $schema=../schemas/ctxpolicy.schema.json"
    else:
        assert first == "#:schema ../schemas/ctxpolicy.schema.json"
    assert (POLICIES / "../schemas/ctxpolicy.schema.json").resolve().exists()


def _agent_blocks(text: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^  ([A-Za-z0-9_.-]+):\s*$", line)
        if m:
            current = m.group(1)
            blocks[current] = ""
        elif current:
            blocks[current] += line + "\n"
    return blocks


def test_every_agent_explains_its_numbers() -> None:
    blocks = _agent_blocks((POLICIES / "agents.yaml").read_text(encoding="utf-8"))
    for agent in AGENTS:
        assert agent in blocks, agent
        comments = [li for li in blocks[agent].splitlines() if "#" in li]
        assert len(comments) >= 3, f"{agent}: say why its numbers are what they are"


def _resolve(path: str, agent: str):  # type: ignore[no-untyped-def]
    from ctxpolicy.resolve.load import load_policy

    return load_policy(str(POLICIES / path), agent)


def _budget(policy):  # type: ignore[no-untyped-def]
    from ctxpolicy.budget import compute_budget

    return compute_budget(policy)


@pytest.mark.parametrize("agent", [*AGENTS, "coding_agent_16k"])
def test_target_below_lowest_layer_threshold(agent: str) -> None:
    """Compaction must end below where it starts, or it thrashes."""
    policy = _resolve("agents.yaml", agent)
    b = _budget(policy)
    lowest = min(
        (s.at for s in policy.pipeline),
        key=lambda s: ["normal", "warning", "error", "critical"].index(s),
    )
    start = b.tokens_for(lowest)
    assert b.target < start, (agent, b.target, start)
    assert b.trigger > 0
    for step in policy.pipeline:
        keep = step.options.get("min_keep_tokens")
        if keep is not None:
            assert keep < b.target, (agent, step.layer, keep, b.target)


def test_documented_numbers() -> None:
    """The triggers the comments of policies/agents.yaml state, at each agent's model."""
    assert _budget(_resolve("agents.yaml", "code_review_agent")).trigger == 106256
    assert _budget(_resolve("agents.yaml", "default")).trigger == 109316
    assert _budget(_resolve("agents.yaml", "customer_service_agent")).trigger == 27520
    assert _budget(_resolve("agents.yaml", "data_analysis_agent")).trigger == 111876
    assert _budget(_resolve("agents.yaml", "coding_agent")).trigger == 20972
    assert _budget(_resolve("agents.yaml", "coding_agent_16k")).trigger == 10486
    assert _budget(_resolve("agents.yaml", "support_agent")).trigger == 54276
    assert _budget(_resolve("dbgpt.toml", "default")).trigger == 115904
    q = _budget(_resolve("dbgpt.toml", "qwen_coder"))
    assert q.window == 32768 and q.trigger == 32768 - 4096


def test_coding_agent_shape() -> None:
    from ctxpolicy.policy.models import ToolGrowth

    for path in ("agents.yaml", "agents.toml"):
        p = _resolve(path, "coding_agent")
        assert isinstance(p.budget.tool_growth, ToolGrowth)
        assert p.budget.tool_growth.learn.quantile == 0.9
        assert p.budget.tool_growth.learn.window == 20
        assert p.budget.tool_growth.initial == "18%"
        assert list(p.tools)[-1] == "*" and p.tools["*"].preprocess == "head_tail"
        assert p.tools["read_file"].preprocess == "head_tail_lines"


def test_toml_equivalent_of_yaml_coding_agent() -> None:
    y = _resolve("agents.yaml", "coding_agent").model_dump(exclude={"source", "description"})
    t = _resolve("agents.toml", "coding_agent").model_dump(exclude={"source", "description"})
    # agents.yaml's coding_agent inherits a few more tool globs from default
    y_tools, t_tools = y.pop("tools"), t.pop("tools")
    assert y == t
    for glob, rule in t_tools.items():
        assert y_tools[glob] == rule


def test_dbgpt_design_a_defaults() -> None:
    p = _resolve("dbgpt.toml", "default")
    assert (p.thresholds.warning, p.thresholds.error, p.thresholds.critical) == (0.70, 0.90, 0.95)
    steps = {s.layer: s for s in p.pipeline}
    assert steps["observation_mask"].options["max_age_rounds"] == 5
    assert steps["observation_mask"].options["max_chars"] == 200
    assert steps["drop_rounds"].options["keep_recent_rounds"] == 3
    assert steps["drop_rounds"].options["min_keep_tokens"] == 10000
    assert steps["summarize"].at == "error" and steps["summarize"].options["max_failures"] == 3
    assert p.on_overflow.layer == "emergency" and p.on_overflow.options["keep_recent_rounds"] == 2
    assert "op_snapshots" in p.snapshots.path


def test_pre_commit_hook() -> None:
    from ruamel.yaml import YAML

    hooks = YAML(typ="safe").load((ROOT / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "ctxpolicy-validate")
    assert hook["entry"] == "ctxpolicy validate" and hook["language"] == "python"
    rx = re.compile(hook["files"])
    for yes in (
        "policies/agents.yaml",
        "policies/dbgpt.toml",
        "a/b/policies/x.yml",
        "svc.ctxpolicy.yaml",
    ):
        assert rx.search(yes), yes
    for no in (".pre-commit-hooks.yaml", "pyproject.toml", "policies/README.md", "docs/x.yaml"):
        assert not rx.search(no), no
