"""Compat readers: the two source designs' files load unchanged and resolve to their numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxpolicy.policy.compat import convert, detect_format, to_native
from ctxpolicy.policy.load import load_document
from ctxpolicy.policy.models import PolicyFile
from ctxpolicy.resolve.checks import budget_numbers
from ctxpolicy.resolve.load import list_agents, load_policy, resolve_all, validate_file
from tests.conftest import DATA
from tests.shared_data import SEED_CONFIGS, require

DBGPT = DATA / "compat" / "dbgpt_agent_context.toml"
COMPRESSION = DATA / "compat" / "context_compression.yaml"


@pytest.mark.parametrize("name", ["dbgpt_agent_context.toml", "context_compression.yaml"])
def test_copies_are_unchanged(name: str) -> None:
    seed = require(SEED_CONFIGS / name)
    assert (DATA / "compat" / name).read_bytes() == seed.read_bytes()


def _data(path: Path) -> dict:
    doc, diags = load_document(path)
    assert doc is not None and diags == []
    return doc.data


def test_detect_format() -> None:
    assert detect_format(_data(DBGPT)) == "dbgpt"
    assert detect_format(_data(COMPRESSION)) == "compression_config"
    assert detect_format(_data(DATA / "valid" / "design_example.yaml")) == "native"
    assert detect_format({"ctxpolicy": 1}) == "native"
    assert detect_format([]) == "native"  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [DBGPT, COMPRESSION])
def test_converted_is_a_valid_native_file(path: Path) -> None:
    native = to_native(_data(path))
    PolicyFile.model_validate(native, strict=True)


def test_design_a_window_is_bounded_by_the_model() -> None:
    assert validate_file(DBGPT, env={}) == []  # api_key's ${env:...} is not policy: never read
    pol = load_policy(DBGPT, env={})
    nums = budget_numbers(pol)
    assert (nums.window, nums.reserve_output, nums.trigger) == (32768, 4096, 28672)
    assert pol.model_name == "Qwen/Qwen2.5-Coder-32B-Instruct"
    assert (pol.thresholds.warning, pol.thresholds.error, pol.thresholds.critical) == (
        0.70,
        0.90,
        0.95,
    )
    layers = [(s.layer, s.at) for s in pol.pipeline]
    assert layers == [
        ("observation_mask", "warning"),
        ("drop_rounds", "warning"),
        ("summarize", "error"),
    ]
    om, dr, sm = (s.options for s in pol.pipeline)
    assert (om["max_age_rounds"], om["max_chars"]) == (5, 200)
    assert (dr["keep_recent_rounds"], dr["min_keep_tokens"]) == (3, 10000)
    assert sm["max_failures"] == 3
    assert (
        pol.on_overflow.layer == "emergency" and pol.on_overflow.options["keep_recent_rounds"] == 2
    )


def test_design_a_without_llms_uses_max_context_tokens(tmp_path: Path) -> None:
    text = DBGPT.read_text()
    p = tmp_path / "agent_context.toml"
    p.write_text(text.split("[[models.llms]]")[0])
    nums = budget_numbers(load_policy(p, env={}))
    assert (nums.window, nums.trigger) == (120000, 115904)


def test_design_a_one_agent_per_extra_llm(tmp_path: Path) -> None:
    p = tmp_path / "two.toml"
    p.write_text(
        DBGPT.read_text() + '\n[[models.llms]]\nname = "org/big-model"\ncontext_length = 200000\n'
    )
    assert list_agents(p) == ["default", "org_big-model"]
    assert budget_numbers(load_policy(p, "org_big-model", env={})).window == 120000


def test_design_b_numbers() -> None:
    pols, diags = resolve_all(COMPRESSION, env={})
    assert diags == []
    assert list(pols) == [
        "default",
        "code_review_agent",
        "customer_service_agent",
        "data_analysis_agent",
    ]
    cr = budget_numbers(pols["code_review_agent"])
    assert (cr.window, cr.reserve_output, cr.tool_growth, cr.safety_margin, cr.trigger) == (
        128000,
        16000,
        20000,
        4000,
        88000,
    )
    assert budget_numbers(pols["default"]).trigger == 128000 - 8000 - 5000 - 4000
    assert budget_numbers(pols["customer_service_agent"]).trigger == 32000 - 2000 - 1000 - 2000
    # defaults come from the article's CompressionConfig dataclass
    assert pols["default"].budget.target == 14000
    assert pols["default"].model.name == "gpt-4o"
    # compression_levels of `default` are inherited
    cs = pols["customer_service_agent"]
    assert (cs.thresholds.warning, cs.thresholds.error, cs.thresholds.critical) == (0.6, 0.75, 0.85)
    assert [s.layer for s in cs.pipeline] == ["observation_mask", "summarize", "offload"]
    assert cs.pipeline[0].options["max_age_rounds"] == 10
    cr_pol = pols["code_review_agent"]
    assert list(cr_pol.tools) == ["read_file", "run_tests", "*"]
    assert cr_pol.tools["read_file"].preprocess == "head_tail_lines"
    assert cr_pol.tools["read_file"].options["max_lines"] == 300
    assert cr_pol.tools["run_tests"].preprocess == "test_failures"
    da = pols["data_analysis_agent"].tools["query_database"]
    assert da.preprocess == "table_rows"
    assert (da.options["max_rows"], da.options["summarize_large_result"]) == (100, True)
    assert pols["default"].tools["*"].options["max_chars"] == 3000


def test_design_b_enable_summary_false(tmp_path: Path) -> None:
    p = tmp_path / "b.yaml"
    p.write_text("default:\n  total_window_tokens: 64000\n  enable_summary: false\n")
    assert [s.layer for s in load_policy(p, env={}).pipeline] == ["observation_mask", "offload"]


def test_unknown_keys_warn_with_position() -> None:
    native, origins, warnings = convert({"default": {"keep_recent_turns": 2, "turbo": True}})
    assert warnings == [
        (("default", "turbo"), "CompressionConfig setting 'turbo' is not understood; ignored")
    ]
    assert origins[("policies", "default", "pipeline", 0, "options", "max_age_rounds")] == (
        "default",
        "keep_recent_turns",
    )
    assert native["policies"]["default"]["pipeline"][0]["options"]["max_age_rounds"] == 2


@pytest.mark.parametrize("path", [DBGPT, COMPRESSION])
def test_converted_file_resolves_to_the_same_policies(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "native.yaml"
    out.write_text(json.dumps(to_native(_data(path))))  # JSON is YAML
    original, d1 = resolve_all(path, env={})
    converted, d2 = resolve_all(out, env={})
    assert d1 == [] and d2 == []
    assert {k: p.model_copy(update={"source": None}) for k, p in original.items()} == {
        k: p.model_copy(update={"source": None}) for k, p in converted.items()
    }
