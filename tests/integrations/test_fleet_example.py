"""examples/fleet.py: two real worker processes serve one conversation through the store.

The requests the model receives must be byte-identical to what a single worker
process sends for the same conversation: each worker builds a fresh session per
request and resumes the conversation's state from the (sqlite) store.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai", reason="the 'openai' extra is not installed")

ROOT = Path(__file__).resolve().parents[2]


def _fleet(workdir: Path, workers: int) -> dict[str, Any]:
    shutil.rmtree(workdir, ignore_errors=True)
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "fleet.py"),
            "--turns",
            "14",
            "--workers",
            str(workers),
            "--workdir",
            str(workdir),
            "--json",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def test_two_workers_send_what_one_process_sends(tmp_path: Path) -> None:
    work = tmp_path / "fleet"
    two = _fleet(work, 2)
    turns = two["turns"]
    assert len({t["worker"] for t in turns}) == 2
    assert all(a["worker"] != b["worker"] for a, b in itertools.pairwise(turns))
    versions = [t["resumed_version"] for t in turns]
    assert versions[0] == 0 and all(b > a for a, b in itertools.pairwise(versions))
    assert any(t["compact_layer"] for t in turns), "the conversation must compact"
    one = _fleet(work, 1)
    assert two["requests"] == one["requests"]  # byte-identical requests
    assert two["rejections"] == one["rejections"] == 0
