"""``ctxpolicy._install``: the hint for a missing extra names an install that works
for how this ctxpolicy was installed (issue 31.2: not on a package index yet)."""

from __future__ import annotations

from typing import Any

import pytest

from ctxpolicy import _install


@pytest.mark.parametrize(
    ("direct_url", "hint"),
    [
        ({}, "pip install 'ctxpolicy[otel]'"),
        (
            {"url": "file:///src/ctx%20policy", "dir_info": {"editable": True}},
            "pip install -e '/src/ctx policy[otel]'",
        ),
        ({"url": "file:///src/ctxpolicy", "dir_info": {}}, "pip install '/src/ctxpolicy[otel]'"),
        (
            {"url": "file:///tmp/ctxpolicy-0.1.0-py3-none-any.whl", "archive_info": {}},
            "pip install '/tmp/ctxpolicy-0.1.0-py3-none-any.whl[otel]'",
        ),
        (
            {
                "url": "https://example.org/ctxpolicy.git",
                "vcs_info": {"vcs": "git", "commit_id": "abc"},
            },
            "pip install 'ctxpolicy[otel] @ git+https://example.org/ctxpolicy.git@abc'",
        ),
    ],
)
def test_the_hint_follows_the_installation(
    monkeypatch: pytest.MonkeyPatch, direct_url: dict[str, Any], hint: str
) -> None:
    monkeypatch.setattr(_install, "_direct_url", lambda: direct_url)
    _install.source.cache_clear()
    _install.extra_hint.cache_clear()
    try:
        assert _install.extra_hint("otel") == hint
    finally:
        _install.source.cache_clear()
        _install.extra_hint.cache_clear()


def test_this_checkout_names_itself() -> None:
    """The dev install is editable from this clone: the hint points at the clone."""
    hint = _install.extra_hint("otel")
    assert hint.startswith("pip install ") and hint.endswith("[otel]'")
