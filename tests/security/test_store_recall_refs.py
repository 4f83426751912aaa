"""Issue 19 item 1: ``ctx_recall`` / ``ctx_search`` cannot reach another conversation.

Attacks the way a model would: every reference form it can build from what it
sees (its own references, the store root shown in them, a victim's folder name it
guessed or learnt): ``..`` after a victim's file, symlinks, URL-encoding, ``file://``
and fsspec URLs, look-alike unicode, NUL bytes, odd types and sizes. Each must be
refused with the same text, which names neither the root nor the victim.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.snapshots import FsspecStore, LocalOptions, LocalStore
from ctxpolicy.snapshots.archive import HistoryArchive
from ctxpolicy.snapshots.names import conv_folder
from ctxpolicy.snapshots.recall import handle_tool_call

NOT_FOUND = "Error: no earlier tool result of this conversation has that reference"
SECRET = "VICTIM-SECRET-7f3a"
ME = "attacker"
VICTIM = "victim-conv"


@pytest.fixture(params=["local", "fsspec-memory", "fsspec-file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "local":
        return LocalStore(root=str(tmp_path / "root"))
    if request.param == "fsspec-file":
        return FsspecStore(root=f"file://{tmp_path}/root")
    return FsspecStore(root=f"memory://sec-{uuid.uuid4().hex}/root")


def _setup(store: Any) -> tuple[Any, Any]:
    mine = store.write(ME, 1, "read_file", {"observation": "my own data"})
    theirs = store.write(VICTIM, 1, "read_file", {"observation": SECRET})
    HistoryArchive(store, VICTIM).append([{"role": "user", "content": SECRET}], step=1)
    return mine, theirs


def _root_text(store: Any) -> str:
    return store.root_path.as_posix() if isinstance(store, LocalStore) else store.base


def _assert_refused(store: Any, out: str) -> None:
    assert out.startswith("Error:"), out
    assert SECRET not in out
    assert VICTIM not in out and conv_folder(VICTIM) not in out
    assert _root_text(store) not in out and "/root" not in out


def _attack_refs(store: Any, theirs: Any, mine: Any) -> list[Any]:
    vf, mf = conv_folder(VICTIM), conv_folder(ME)
    vfile = Path(theirs.path.split("://", 1)[-1]) if "://" in theirs.path else Path(theirs.path)
    root = vfile.parent.parent.as_posix()
    scheme = theirs.path.split("://", 1)[0] + "://" if "://" in theirs.path else ""
    enc = lambda s: s.replace(".", "%2e").replace("/", "%2f")  # noqa: E731
    return [
        theirs.uri,
        theirs.path,
        f"{theirs.uri}.json",
        # the reported bug: a victim's file, then our own folder, then ..
        f"{scheme}{root}/{vf}/{theirs.name}.json/{mf}/..",
        f"{scheme}{root}/{mf}/../{vf}/{theirs.name}.json",
        f"{scheme}{root}/{mf}/./../{vf}/./{theirs.name}.json",
        f"{scheme}{root}//{vf}//{theirs.name}.json",
        f"ctxsnap://{mf}/../{vf}/{theirs.name}",
        f"ctxsnap://{mf}/%2e%2e/{vf}/{theirs.name}",
        f"ctxsnap://{vf}%2F{theirs.name}",
        f"ctxsnap://{mf}/..%2f{vf}/{theirs.name}",
        f"file://{root}/{mf}/{enc('../')}{vf}/{theirs.name}.json",
        f"file://{root}/{mf}/%2e%2e/{vf}/{theirs.name}.json",
        f"file://localhost{root}/{vf}/{theirs.name}.json",
        f"FILE://{root}/{vf}/{theirs.name}.json",
        f"{root}/{mf}/..\u2215{vf}/{theirs.name}.json",  # division slash
        f"{root}/{mf}/\uff0e\uff0e/{vf}/{theirs.name}.json",  # full-width dots
        f"ctxsnap://{vf.upper()}/{theirs.name}",
        f"ctxsnap://{VICTIM}/{theirs.name}",
        f"ctxsnap://{vf}/history",
        f"ctxsnap://{vf}/history#1",
        f"ctxsnap://{mf}/../{vf}/history",
        f"ctxsnap://{mf}/history/../../{vf}/history",
        f"{root}/{vf}/history_000001.jsonl",
        f"{root}/{vf}/history.idx",
        f"{mine.uri}\x00/../../{vf}/{theirs.name}",
        f"{mine.path}\x00",
        f"{theirs.uri}\n",
        " " + theirs.uri,
        "ctxsnap://" + "A" * 100_000,
        "/" * 5000,
        "../" * 2000 + "etc/passwd",
        "/etc/passwd",
        "ctxsnap://../../etc/passwd",
        "memory://" + root + f"/{vf}/{theirs.name}.json",
        "s3://bucket/" + vf + f"/{theirs.name}.json",
        "\ud800",
        "",
        "\x00",
        123,
        12.5,
        None,
        True,
        ["ctxsnap://x"],
        {"ref": theirs.uri},
        theirs.uri.encode(),
    ]


def test_every_attack_reference_is_refused(store: Any) -> None:
    mine, theirs = _setup(store)
    assert handle_tool_call(store, ME, "ctx_recall", {"ref": mine.uri}) == "my own data"
    for ref in _attack_refs(store, theirs, mine):
        for args in ({"ref": ref}, json.dumps({"ref": ref}) if isinstance(ref, str) else None):
            if args is None:
                continue
            out = handle_tool_call(store, ME, "ctx_recall", args)
            _assert_refused(store, out)


def test_not_yours_and_missing_read_the_same(store: Any) -> None:
    _mine, theirs = _setup(store)
    missing = handle_tool_call(
        store, ME, "ctx_recall", {"ref": f"ctxsnap://{conv_folder('nobody')}/step_001_x"}
    )
    theirs_out = handle_tool_call(store, ME, "ctx_recall", {"ref": theirs.uri})
    assert missing == theirs_out  # no oracle for which conversations exist


@pytest.mark.parametrize("layout", ["files", "segments"])
def test_symlinks_in_own_folder_are_not_followed(tmp_path: Path, layout: str) -> None:
    store = LocalStore(LocalOptions(layout=layout), root=str(tmp_path / "root"))  # type: ignore[arg-type]
    mine, theirs = _setup(store)
    own = store.root_path / mine.conv_id
    victim = store.root_path / theirs.conv_id
    link = own / "step_009_read_file.json"
    if layout == "files":
        os.symlink(theirs.path, link)
    else:  # a segment of mine that is the victim's segment
        os.symlink(victim / "snapshots_000001.seg", own / "snapshots_000009.seg")
    for ref in (f"ctxsnap://{own.name}/step_009_read_file", str(link)):
        _assert_refused(store, handle_tool_call(store, ME, "ctx_recall", {"ref": ref}))
    assert SECRET not in handle_tool_call(store, ME, "ctx_search", {"pattern": "VICTIM"})
    # nor is a whole own folder that is a symlink to the victim's
    other = "attacker-2"
    os.symlink(victim, store.root_path / conv_folder(other))
    ref = f"ctxsnap://{conv_folder(other)}/{theirs.name}"
    _assert_refused(store, handle_tool_call(store, other, "ctx_recall", {"ref": ref}))
    assert SECRET not in handle_tool_call(store, other, "ctx_search", {"pattern": "VICTIM"})


def test_search_never_sees_another_conversation(store: Any) -> None:
    _setup(store)
    for pattern, regex in (("VICTIM", False), ("SECRET", False), (".*", True), ("7f3a", False)):
        out = handle_tool_call(store, ME, "ctx_search", {"pattern": pattern, "regex": regex})
        assert SECRET not in out and conv_folder(VICTIM) not in out


@pytest.mark.parametrize(
    "args",
    [
        {"ref": "x", "lines": "1-" + "9" * 5000},
        {"ref": "x", "lines": [1, "2"]},
        {"ref": "x", "lines": {"a": 1}},
        {"ref": "x", "grep": 5},
        {"ref": "x", "grep": "a\x00b"},
        {"ref": "x", "grep": "g" * 100_000},
        {"ref": "x", "extra": 1},
        {"pattern": 5},
        {"pattern": "a", "regex": "yes"},
        {"pattern": "p" * 100_000},
        {"pattern": "a\x00"},
    ],
)
def test_hostile_arguments_get_a_clear_error(store: Any, args: dict[str, Any]) -> None:
    mine, _ = _setup(store)
    if args.get("ref") == "x":
        args = {**args, "ref": mine.uri}
    name = "ctx_recall" if "ref" in args else "ctx_search"
    out = handle_tool_call(store, ME, name, args)
    assert out.startswith("Error: ") and "Traceback" not in out
    _assert_refused(store, out)


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 100_000 + "]" * 100_000,
        "{" * 50_000,
        '{"ref": "' + "x" * 200_000 + '"}',
        "\ud800",
        "null",
    ],
)
def test_hostile_raw_arguments(store: Any, raw: str) -> None:
    _setup(store)
    out = handle_tool_call(store, ME, "ctx_recall", raw)
    assert out.startswith("Error: ")


def test_history_of_own_conversation_is_recallable(store: Any) -> None:
    _setup(store)
    arch = HistoryArchive(store, ME)
    ref = arch.append([{"role": "assistant", "content": "I decided to use port 8443"}], step=4)
    out = handle_tool_call(store, ME, "ctx_recall", {"ref": ref})
    assert "port 8443" in out and SECRET not in out
    hit = handle_tool_call(store, ME, "ctx_search", {"pattern": "8443"})
    assert hit.startswith(f"ctxsnap://{conv_folder(ME)}/history#1:")
