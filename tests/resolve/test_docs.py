"""docs/policy-reference.md is generated from the models and must be fresh."""

from __future__ import annotations

from pathlib import Path

from ctxpolicy.policy import models
from ctxpolicy.resolve.docs import render_reference
from ctxpolicy.resolve.schema import REGENERATE

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "policy-reference.md"


def test_reference_is_fresh() -> None:
    actual = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    assert actual == render_reference(), (
        f"{REFERENCE.relative_to(ROOT)} is stale; regenerate it with: {REGENERATE}"
    )


def test_every_model_field_is_documented() -> None:
    text = render_reference()
    for model in (
        models.PolicyFile,
        models.ModelSpec,
        models.AgentPolicy,
        models.Budget,
        models.ToolGrowth,
        models.LearnSpec,
        models.Thresholds,
        models.PipelineStep,
        models.OverflowStep,
        models.ToolRule,
        models.Snapshots,
        models.Pinned,
        models.Ledger,
        models.CacheSpec,
        models.StateSpec,
    ):
        assert f"## {model.__name__}\n" in text, model.__name__
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in text, f"{model.__name__}.{name}"


def test_builtin_components_have_option_tables() -> None:
    from ctxpolicy.plugins import get_registry

    text = render_reference()
    reg = get_registry()
    for kind in ("layer", "preprocessor", "snapshot_store", "state_store"):
        for name in reg.names(kind):  # type: ignore[arg-type]
            info = reg.plugins[reg.plugin_of(kind, name) or ""]  # type: ignore[arg-type]
            if info.builtin:
                assert f"#### `{name}`" in text
                for opt in reg.get(kind, name).Options.model_fields:  # type: ignore[arg-type,union-attr]
                    assert f"| `{opt}` |" in text


def test_budget_constraints_rendered() -> None:
    text = render_reference()
    line = next(li for li in text.splitlines() if li.startswith("| `target` |"))
    assert "> 0" in line and "< 1" in line and "`0.7`" in line
