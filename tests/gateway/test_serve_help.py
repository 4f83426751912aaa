"""``ctxpolicy serve --help`` documents every option, and docs/cli.md lists each one."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from ctxpolicy.cli.serve import serve

ROOT = Path(__file__).resolve().parents[2]


def test_every_option_is_documented() -> None:
    out = CliRunner().invoke(serve, ["--help"], terminal_width=200).output
    table = (ROOT / "docs" / "cli.md").read_text().split("## serve", 1)[1]
    options = [p for p in serve.params if isinstance(p, click.Option)]
    assert len(options) >= 15
    for p in options:
        assert p.help and len(p.help) > 10, p.name
        for flag in p.opts:
            assert flag in out, flag
            assert f"`{flag}" in table or f", `{flag}" in table, flag


def test_help_documents_identity_routing_and_presets() -> None:
    out = CliRunner().invoke(serve, ["--help"], terminal_width=200).output
    for text in (
        "X-Ctxpolicy-Conversation",
        "x-claude-code-session-id",
        "prompt_cache_key",
        "x-session-id",
        "continuity",
        "every Anthropic path goes to --anthropic-upstream",
        "is a 404",
        "coding_clients.yaml",
    ):
        assert text in out, text
