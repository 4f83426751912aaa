"""The search space: defaults from components, the tune: section, the overlay."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxpolicy.plugins import get_registry
from ctxpolicy.policy.models import TuneRange
from ctxpolicy.resolve.load import load_policy, validate_file
from ctxpolicy.tune.space import SpaceError, build_space, changed, matches, overlay

from .conftest import ROOT

AGENTS = ROOT / "policies" / "agents.yaml"


def test_default_space_of_coding_agent_comes_from_its_components():
    pol = load_policy(AGENTS, "coding_agent")
    params = {p.path: p for p in build_space(pol, registry=get_registry(), tool_names=["bash"])}
    assert {"budget.target", "thresholds.warning", "budget.tool_growth.initial"} <= set(params)
    assert "pipeline[observation_mask].max_age_rounds" in params
    keep = params["pipeline[drop_rounds].min_keep_tokens"]  # searched as % of the window
    assert keep.range.percent and keep.tokens_of == 32768
    written = next(s.options for s in pol.pipeline if s.layer == "drop_rounds")["min_keep_tokens"]
    assert keep.render(keep.base) == written and keep.describe_base() == str(written)
    # only the tool rules the traces use: bash → command_output, not read_file
    assert "tools[bash].head_lines" in params
    assert not any(p.startswith("tools[read_file]") for p in params)
    # a default range is widened to hold the base value
    for p in params.values():
        if p.range.choices is None and isinstance(p.base, (int, float)):
            assert p.range.low <= p.base <= p.range.high, p.path


def test_tune_section_narrows_widens_and_adds(tmp_path: Path):
    pol = load_policy(AGENTS, "coding_agent").model_copy(
        update={
            "tune": load_policy(AGENTS, "coding_agent").tune.model_copy(
                update={
                    "only": ["budget.*", "pipeline[*"],
                    "exclude": ["budget.tool_growth*"],
                    "space": {
                        "budget.target": TuneRange(low=0.4, high=0.6, step=0.1),
                        "pipeline[summarize].at": TuneRange(choices=["warning", "error"]),
                    },
                }
            )
        }
    )
    params = {p.path: p for p in build_space(pol, registry=get_registry())}
    assert params["budget.target"].range.high == 0.6
    assert params["pipeline[summarize].at"].base == "warning"
    assert not any(p.startswith(("thresholds.", "budget.tool_growth", "tools[")) for p in params)
    bad = pol.model_copy(
        update={
            "tune": pol.tune.model_copy(
                update={"space": {"pipeline[nope].x": TuneRange(low=1, high=2)}}
            )
        }
    )
    with pytest.raises(SpaceError, match=r"pipeline\[nope\]\.x"):
        build_space(bad, registry=get_registry())


def test_matches_treats_brackets_literally():
    assert matches("tools[*].max_chars", "tools[*].max_chars")
    assert matches("tools[bash].head_lines", "tools[*")
    assert not matches("tools[bash].head_lines", "pipeline[*")


def test_overlay_sets_only_what_changed_and_restates_the_pipeline():
    reg = get_registry()
    pol = load_policy(AGENTS, "coding_agent")
    params = build_space(pol, registry=reg, tool_names=["grep"])
    same = {p.path: p.snap(p.base) for p in params}
    body, where = overlay(pol, params, same, registry=reg)
    assert body == {"extends": "coding_agent"} and where == []
    values = {**same, "tools[*].max_chars": 2000, "pipeline[observation_mask].max_age_rounds": 5}
    body, where = overlay(pol, params, values, registry=reg)
    assert body["tools"] == {"*": {"options": {"max_chars": 2000}}}
    assert [s["layer"] for s in body["pipeline"]] == [s.layer for s in pol.pipeline]
    # 5 is observation_mask's default: still written, since it is what changed
    assert body["pipeline"][0]["options"]["max_age_rounds"] == 5
    assert {p.path for _, p in where} == set(values) - {
        p.path for p in params if values[p.path] == p.snap(p.base)
    }
    assert len(changed(params, values)) == 2


def test_a_bad_range_in_the_tune_section_is_a_diagnostic_with_its_position(tmp_path: Path):
    f = tmp_path / "p.yaml"
    f.write_text(
        "ctxpolicy: 1\npolicies:\n  a:\n    model: {context_window: 8192}\n"
        "    tune:\n      space:\n        budget.target: {low: 0.8, high: 0.2}\n"
    )
    diags = [d for d in validate_file(f) if d.severity == "error"]
    assert diags, "low >= high must be rejected"
    text = diags[0].format()
    assert f"{f}:7:" in text and "low" in text
