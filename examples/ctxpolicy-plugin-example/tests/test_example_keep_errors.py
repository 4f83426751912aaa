"""Tests of the keep_errors layer: our own behaviour, then ctxpolicy's conformance suite."""

from __future__ import annotations

import ctxpolicy_plugin_example
import pytest
from ctxpolicy_plugin_example import KeepErrors

from ctxpolicy.conversation import to_units
from ctxpolicy.testing import conformance

# Works whether or not the package is pip-installed (then the entry point found it).
conformance.ensure_registered(ctxpolicy_plugin_example)

# One line: the whole ctxpolicy layer conformance suite against our layer.
TestKeepErrorsConformance = conformance.layer_suite("keep_errors")
TestKeepErrorsStrictConformance = conformance.layer_suite(
    "keep_errors", options={"keep_recent_rounds": 0, "error_patterns": ["Traceback"]}
)


def conversation(outputs: list[str]) -> list[dict]:
    msgs: list[dict] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the build."},
    ]
    for i, out in enumerate(outputs):
        cid = f"c{i}"
        msgs.append(
            {
                "role": "assistant",
                "content": f"step {i}",
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "run", "arguments": "{}"}}
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
    msgs.append({"role": "user", "content": "and now?"})
    return msgs


def tool_texts(units) -> list[str]:
    return [m["content"] for u in units for m in u.tool_messages]


def test_drops_only_rounds_without_errors() -> None:
    ok = "all good " * 200
    msgs = conversation(
        [ok, "Traceback (most recent call last):\nKeyError: 'x'", ok, ok, "FAILED test_a", ok]
    )
    units, _ = to_units(msgs)
    _ctx, result = conformance.run_layer(
        KeepErrors, {"keep_recent_rounds": 1}, units, target_ratio=0.0
    )
    texts = tool_texts(result.units)
    assert any("Traceback" in t for t in texts)
    assert any("FAILED" in t for t in texts)
    assert texts[-1] == ok  # the newest round is kept
    assert result.report["dropped_rounds"] == 3
    assert result.report["kept_error_rounds"] == 2
    assert [u.round for u in result.dropped] == [0, 2, 3]


def test_stops_at_target() -> None:
    ok = "all good " * 200
    units, _ = to_units(conversation([ok] * 6))
    _, result = conformance.run_layer(
        KeepErrors, {"keep_recent_rounds": 0}, units, target_ratio=0.95
    )
    assert result.report["dropped_rounds"] == 1  # just enough, oldest first
    assert result.dropped[0].round == 0


def test_custom_patterns_case_sensitive() -> None:
    units, _ = to_units(conversation(["error: lower", "ERROR: upper", "fine"]))
    opts = {"error_patterns": ["ERROR"], "case_sensitive": True, "keep_recent_rounds": 0}
    _, result = conformance.run_layer(KeepErrors, opts, units, target_ratio=0.0)
    assert tool_texts(result.units) == ["ERROR: upper"]


def test_invalid_regex_is_an_option_error() -> None:
    with pytest.raises(ValueError, match="invalid regular expression"):
        KeepErrors.Options.model_validate({"error_patterns": ["("]})


def test_in_a_session(ctxpolicy_session, make_conversation) -> None:
    """Run by the engine under our plugin's name (found by its entry point when installed)."""
    session = ctxpolicy_session(
        """
ctxpolicy: 1
policies:
  default:
    model: {context_window: 8000}
    budget: {reserve_output: 1000, safety_margin: 500, tool_growth: 0, target: 0.5}
    pipeline:
      - {layer: keep_errors, at: normal, options: {keep_recent_rounds: 1}}
    snapshots: {enabled: false}
"""
    )
    assert session.registry.plugin_of("layer", "keep_errors") == "ctxpolicy_plugin_example"
    msgs = make_conversation(30, seed=4, errors=0.3)
    out = session.prepare(msgs)
    assert len(out) < len(msgs)
    kinds = [e["type"] for e in session.events]
    compacted = [e for e in session.events if e["type"] == "context.compacted"]
    assert compacted and compacted[0]["plugin"] == "ctxpolicy_plugin_example"
    assert "layer.failed" not in kinds and "layer.rejected" not in kinds
