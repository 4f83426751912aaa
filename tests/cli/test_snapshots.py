"""``ctxpolicy snapshots list`` and ``show`` on a real local store."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ctxpolicy.cli import main
from ctxpolicy.snapshots import LocalStore


def _store(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "snaps"
    store = LocalStore(root=str(root))
    ref = store.write(
        "run-42", 3, "read_file", {"action": "read_file", "observation": "line\n" * 40}
    )
    store.write("run-42", 4, "bash", {"action": "bash", "observation": "ok"})
    store.write("other", 1, "grep", {"action": "grep", "observation": "hit"})
    return root, ref.uri


def test_list_conversations_and_snapshots(tmp_path: Path) -> None:
    root, uri = _store(tmp_path)
    r = CliRunner().invoke(main, ["snapshots", "list", "--root", str(root), "--json"])
    assert r.exit_code == 0, r.output
    rows = {c["folder"]: c["snapshots"] for c in json.loads(r.output)["conversations"]}
    assert rows == {"run-42": 2, "other": 1}
    r = CliRunner().invoke(main, ["snapshots", "list", "--root", str(root), "run-42"])
    assert r.exit_code == 0, r.output
    assert uri in r.output and "step_004_bash" in r.output
    r = CliRunner().invoke(main, ["snapshots", "list", "--root", str(root), "nobody"])
    assert r.exit_code == 1 and "no snapshots" in r.output


def test_show_by_reference_and_by_path(tmp_path: Path) -> None:
    root, uri = _store(tmp_path)
    r = CliRunner().invoke(main, ["snapshots", "show", "--root", str(root), uri])
    assert r.exit_code == 0, r.output
    assert "action: read_file" in r.output and r.output.count("line") == 40
    path = str(root / "run-42" / "step_003_read_file.json")
    r = CliRunner().invoke(main, ["snapshots", "show", "--root", str(root), path, "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["action"] == "read_file"
    # outside the store, or unknown: exit 1 with a message, never a traceback
    for bad in ("/etc/passwd", "ctxsnap://run-42/step_009_nope"):
        r = CliRunner().invoke(main, ["snapshots", "show", "--root", str(root), bad])
        assert r.exit_code == 1 and "Traceback" not in r.output, r.output
