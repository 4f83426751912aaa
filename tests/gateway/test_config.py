"""The HTTP parser and event loop ``ctxpolicy serve`` runs on (``--http`` / ``--loop``)."""

from __future__ import annotations

import importlib.util

import pytest

from ctxpolicy.gateway.config import server_impls


def test_auto_takes_the_fastest_installed() -> None:
    http, loop = server_impls()
    assert http == ("httptools" if importlib.util.find_spec("httptools") else "h11")
    assert loop == ("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")


def test_the_gateway_extra_brings_httptools_and_uvloop() -> None:
    # the lock installs both with the gateway extra (uvloop: not on Windows)
    assert server_impls() == ("httptools", "uvloop")


def test_a_named_one_is_taken_as_named() -> None:
    assert server_impls("h11", "asyncio") == ("h11", "asyncio")
    assert server_impls("httptools", "auto")[0] == "httptools"


def test_unknown_or_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unknown HTTP parser 'fast'"):
        server_impls("fast")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name)
    )
    assert server_impls("auto", "auto")[1] == "asyncio"
    with pytest.raises(ValueError, match="'uvloop' is not installed"):
        server_impls("auto", "uvloop")
