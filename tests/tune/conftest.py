"""Shared fixtures of the tune tests: three short real traces and a deliberately bad policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_data import TRACES, require

ROOT = Path(__file__).resolve().parents[2]
WASTEFUL = ROOT / "tests" / "data" / "tune" / "wasteful.yaml"
#: Short traces (24-44 messages) whose tool results make compaction matter at 8k.
SHORT = (
    "swe-agent__demo.replay__marshmallow-code__marshmallow-1867__xml_sys-env_window100__t-0.20__p-0.95__c-2.00__install-1.jsonl",
    "swe-agent__demo.ctf.crypto.katy.jsonl",
    "swe-agent__demo.ctf.web.i_got_id_demo.jsonl",
)


@pytest.fixture
def traces3() -> list[str]:
    return [str(require(TRACES / name)) for name in SHORT]
