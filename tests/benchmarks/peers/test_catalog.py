"""The peer catalog: uninstalled peers are skipped with a reason, never a crash."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks.peers import catalog


def test_every_peer_has_a_label_a_package_and_a_builder() -> None:
    assert set(catalog.LABELS) == set(catalog.PACKAGES) == set(catalog.PEERS)


def test_a_missing_package_is_skipped_with_its_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "langmem" else real(name, *a),
    )
    ok, skipped = catalog.available_peers()
    assert "langmem" not in ok
    # the other peers are skipped too where their packages are missing (the dev
    # install has no `bench` extra): exactly the missing ones, each with its hint
    missing = {k for k in catalog.PEERS if k == "langmem" or real(catalog.PACKAGES[k]) is None}
    assert len(skipped) == len(missing) == len(catalog.PEERS) - len(ok)
    (langmem,) = [s for s in skipped if "langmem" in s]
    assert catalog.INSTALL_HINT in langmem
    assert all(catalog.INSTALL_HINT in s for s in skipped)
