"""A "send everything" run that overflowed is labelled as such wherever it appears:
the ratios' unit in the ruler lines, and the ``none`` row of the summary."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ctxpolicy.cli.simulate import simulate

from .conftest import ROOT

POLICY = str(ROOT / "policies" / "agents.yaml")
DEMO = sorted(str(p) for p in (ROOT / "examples" / "traces").glob("*.jsonl"))


def _run(*args: str) -> str:
    res = CliRunner().invoke(simulate, [*args], catch_exceptions=False, terminal_width=200)
    return res.output


def test_an_overflowing_send_everything_is_labelled() -> None:
    common = [DEMO[0], "--policy", POLICY, "--agent", "coding_agent_16k", "--window", "4000"]
    doc = json.loads(_run(*common, "--baseline", "none", "--json"))
    none = doc["summary"]["none"]
    assert none["overflows"] > 0
    assert doc["summary"]["coding_agent_16k"]["overflows_none"] == none["overflows"]
    note = f"(overflowed on {none['overflows']:,} of {none['steps']:,} calls)"
    out = _run(*common, "--baseline", "none")
    assert f"none {note}" in out
    assert f"total cost ÷ send everything {note}" in out
    # without the baseline run too: the unit of every ratio says it overflowed
    assert f"total cost ÷ send everything {note}" in _run(*common)


def test_a_send_everything_that_fits_is_not_labelled() -> None:
    out = _run(DEMO[0], "--policy", POLICY, "--agent", "coding_agent", "--window", "1000000")
    assert "total cost ÷ send everything " in out
    assert "overflowed on" not in out
