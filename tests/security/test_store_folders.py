"""Issue 19 item 3: the conv-id → folder mapping is injective for all ids.

A property test over arbitrary unicode ids (lone surrogates included), the crafted
collisions of the previous naming (sanitised id vs. the literal sanitised name,
look-alikes, case, long ids with a shared prefix), and an end-to-end check that a
crafted id neither reads nor writes another conversation's folder.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.snapshots import LocalStore
from ctxpolicy.snapshots.names import conv_folder, folder_to_conv, is_folder
from ctxpolicy.snapshots.recall import handle_tool_call

ids = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=300)
ascii_ids = st.text(alphabet="aAbB-_.~=/\\%0123456789", max_size=130)


def _old_folder(raw: str) -> str:
    """The previous naming (sanitise, then a 10-hex hash when changed)."""
    import unicodedata

    norm = unicodedata.normalize("NFKC", raw)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", norm).lstrip(".").replace("..", "_")
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    if not safe:
        return f"_{digest}"
    if len(safe) > 80 or safe != raw:
        return f"{safe[:69]}-{digest}"
    return safe


def _check_folder(f: str) -> None:
    assert is_folder(f)
    assert 1 <= len(f) <= 150
    assert re.fullmatch(r"[a-z0-9~A-F=-]+", f)
    assert not f.startswith(".") and "/" not in f and "\\" not in f and "\x00" not in f


@settings(max_examples=400, deadline=None)
@given(a=ids, b=ids)
def test_injective_any_unicode(a: str, b: str) -> None:
    fa, fb = conv_folder(a), conv_folder(b)
    _check_folder(fa)
    if a != b:
        assert fa != fb
        assert fa.casefold() != fb.casefold()  # also on case-insensitive file systems


@settings(max_examples=400, deadline=None)
@given(a=ascii_ids, b=ascii_ids)
def test_injective_on_the_dangerous_alphabet(a: str, b: str) -> None:
    if a != b:
        assert conv_folder(a) != conv_folder(b)
        assert conv_folder(a).casefold() != conv_folder(b).casefold()


@settings(max_examples=300, deadline=None)
@given(a=ids)
def test_short_form_decodes_back(a: str) -> None:
    f = conv_folder(a)
    if "=" not in f:
        assert folder_to_conv(f) == a


@settings(max_examples=200, deadline=None)
@given(a=ids, b=ids)
def test_new_folders_never_equal_an_old_folder_of_another_id(a: str, b: str) -> None:
    if a != b:
        assert conv_folder(a) != _old_folder(b)


def test_crafted_collisions_of_the_old_naming() -> None:
    pairs = []
    for victim in ["a/b", ".run", "../x", "user@example.com", "Ａｄｍｉｎ", "", "x" * 200]:
        pairs.append((victim, _old_folder(victim)))  # the literal old folder as an id
    pairs += [
        ("a", "A"),
        ("run", "RUN"),
        ("a/b", "a~2Fb"),
        ("a~2Fb", "a/b"),
        ("x" * 200 + "1", "x" * 200 + "2"),  # long ids with a shared 200-char prefix
        ("~", ""),
        ("=", "~3D"),
        ("\ud800", "\ufffd"),
        ("é", "e\u0301"),  # NFC vs NFD: distinct ids stay distinct
    ]
    for victim, attacker in pairs:
        assert victim != attacker
        assert conv_folder(victim) != conv_folder(attacker), (victim, attacker)
    # the old naming really collided on the first group
    assert _old_folder("a/b") == _old_folder(_old_folder("a/b"))
    # an old hashed folder is never the new folder of the id that spells it
    for victim in [".run", "a/b", "a b", "x" * 100]:
        old = _old_folder(victim)
        assert re.search(r"-[0-9a-f]{10}$", old)
        assert conv_folder(old) != old


def test_crafted_id_cannot_read_or_write_the_victims_folder(tmp_path: Path) -> None:
    store = LocalStore(root=str(tmp_path))
    victim = "team/alice"
    store.write(victim, 1, "read_file", {"observation": "alice's secret"})
    for attacker in [_old_folder(victim), victim.upper(), victim + " ", "team\u2215alice"]:
        mine = store.write(attacker, 1, "read_file", {"observation": "x"})
        assert Path(mine.path).parent.name != conv_folder(victim)
        out = handle_tool_call(store, attacker, "ctx_search", {"pattern": "secret"})
        assert "alice" not in out
    assert [r.name for r in store.list(victim)] == ["step_001_read_file"]


def test_common_ids_keep_their_folder() -> None:
    # ids the old naming kept verbatim and that are [a-z0-9-]: same folder both ways,
    # so references written before the change still resolve
    for cid in [
        "run-42",
        "3f2c9a1b7d4e",
        "agent-loop",
        "c",
        "9f1b6a58-3c1e-4c7e-9f43-2b8d1c0a7e55",
    ]:
        assert conv_folder(cid) == cid == _old_folder(cid)
    # ... except the shape of an old *hashed* folder, which gets an escape
    assert conv_folder("run-0123456789") == "run~2D0123456789"
