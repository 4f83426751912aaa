"""policies/README.md's prose agrees with the numbers of policies/agents.yaml: every
number the README quotes is read back from the resolved policies (never hard-coded
here), so a change of agents.yaml that leaves the README behind fails with the
sentence to update."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxpolicy.policy.models import Policy
from ctxpolicy.resolve.load import list_agents, load_policy

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "policies" / "README.md"
AGENTS = ROOT / "policies" / "agents.yaml"


def _prose() -> str:
    return " ".join(README.read_text(encoding="utf-8").split())


def _policy(agent: str) -> Policy:
    return load_policy(AGENTS, agent, env={})


def _step(p: Policy, layer: str) -> dict:
    return next(s.options for s in p.pipeline if s.layer == layer)


def _percent(value: float) -> str:
    return f"{value * 100:g}"


#: (what the README says, as a regex with one group per quoted number) ->
#: the numbers agents.yaml gives, as the README writes them
QUOTES: list[tuple[str, Callable[[], tuple[str, ...]]]] = [
    (
        r"`coding_agent` learns tool growth \(`quantile: ([\d.]+)` of the last (\d+) results, "
        r"never\s+below (\d+) % of the window\)",
        lambda: (
            f"{_policy('coding_agent').budget.tool_growth.learn.quantile:g}",  # type: ignore[union-attr]
            str(_policy("coding_agent").budget.tool_growth.learn.window),  # type: ignore[union-attr]
            str(_policy("coding_agent").budget.tool_growth.min).rstrip("%"),  # type: ignore[union-attr]
        ),
    ),
    (
        r"cuts anything not otherwise handled to (\d+) characters with `head_tail`",
        lambda: (str(_policy("coding_agent").tools["*"].options["max_chars"]),),
    ),
    (
        r"It compacts at (\d+) % of the trigger, down to a target of (\d+) %",
        lambda: (
            _percent(_policy("coding_agent").thresholds.warning),
            _percent(float(_policy("coding_agent").budget.target)),
        ),
    ),
    (
        r"masks tool output older than (\d+) rounds",
        lambda: (str(_step(_policy("coding_agent"), "observation_mask")["max_age_rounds"]),),
    ),
    (
        r"folds everything but the newest (\d+) rounds? into one summary",
        lambda: (str(_step(_policy("coding_agent"), "summarize")["keep_recent_rounds"]),),
    ),
    (
        r"with a small ledger \((\d+) %\)",
        lambda: (str(_policy("coding_agent").ledger.max_tokens).rstrip("%"),),
    ),
    (
        r"threshold \(`warning`, ([\d.]+)–([\d.]+) × trigger across the agents\)",
        lambda: (
            f"{min(_policy(a).thresholds.warning for a in list_agents(AGENTS)):g}",
            f"{max(_policy(a).thresholds.warning for a in list_agents(AGENTS)):g}",
        ),
    ),
]


@pytest.mark.parametrize(("pattern", "actual"), QUOTES, ids=[pattern[:40] for pattern, _ in QUOTES])
def test_readme_quotes_the_numbers_of_agents_yaml(
    pattern: str, actual: Callable[[], tuple[str, ...]]
) -> None:
    m = re.search(pattern, _prose())
    assert m, f"policies/README.md no longer says: {pattern}"
    assert m.groups() == actual(), (
        f"policies/README.md quotes {m.groups()} where agents.yaml says {actual()}: "
        f"update the sentence {m.group(0)!r}"
    )


def test_every_agent_the_readme_lists_exists() -> None:
    table = README.read_text(encoding="utf-8").split("\n\n", 2)[1]
    listed = set(re.findall(r"`([a-z0-9_]+_agent(?:_16k)?|default)`", table))
    assert listed and listed <= set(list_agents(AGENTS))
