"""The built-in local store loads and archives where ``fcntl`` does not exist (issue 26:
the import is guarded; off POSIX appends are serialised within the process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["fcntl"] = None  # `import fcntl` raises ImportError, as on Windows
    from ctxpolicy.snapshots import local
    from ctxpolicy.snapshots.archive import HistoryArchive
    assert local.fcntl is None
    store = local.LocalStore(root=sys.argv[1])
    arch = HistoryArchive(store, "c")
    for step in range(3):
        arch.append([{"role": "user", "content": f"m{step}"}], step=step)
    print(len(HistoryArchive(store, "c")), HistoryArchive(store, "c").message(2)[1]["content"])
    """
)


def test_the_local_store_works_without_fcntl(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "m1"]
