"""Docs that show policies and commands stay true (issue 22 item 7).

* docs/plugins.md: the tutorial's layer (its own code block) registered, the
  tutorial's policy validates — ``model: gpt-4o`` comes from the built-in catalogue;
* the built-in model catalogue: every entry is a valid ``ModelSpec`` and usable by name;
* docs/cli.md: every ``console`` example of ``ctxpolicy validate`` / ``explain`` run
  from the repository root prints the lines shown (``...`` elides lines).
"""

from __future__ import annotations

import re
import shlex
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli import main
from ctxpolicy.policy.catalogue import builtin_models
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.resolve.load import load_policy, validate_file

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


@pytest.fixture
def tutorial_layer(register_plugin) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """The layer of docs/plugins.md step 2, exactly as written there, registered."""
    [code] = [b for b in blocks(DOCS / "plugins.md", "python") if "class TrimOld(Layer)" in b]
    module = types.ModuleType("tutorial_trim_old")
    exec(compile(code, "docs/plugins.md", "exec"), module.__dict__)  # our own docs

    from ctxpolicy import hookimpl

    class Plugin:
        @hookimpl
        def ctxpolicy_register_layers(self, register):  # type: ignore[no-untyped-def]
            register(module.TrimOld)

    register_plugin(Plugin(), "tutorial_trim_old")
    yield


def test_plugins_tutorial_policy_validates(tutorial_layer: None, tmp_path: Path) -> None:
    [policy] = [
        b for b in blocks(DOCS / "plugins.md", "yaml") if "layer: trim_old" in b and "model:" in b
    ]
    p = tmp_path / "agents.yaml"
    p.write_text(policy)
    assert validate_file(p, json_schema=True) == []
    pol = load_policy(p, "default")
    assert pol.model_name == "gpt-4o" and pol.model.context_window == 128000
    assert [s.layer for s in pol.pipeline] == ["trim_old", "summarize"]


def test_catalogue_entries_are_valid_and_usable(tmp_path: Path) -> None:
    models = builtin_models()
    for required in (
        "gpt-4o",
        "gpt-4.1",
        "gpt-5",
        "o3",
        "o4-mini",
        "claude-sonnet-4-5",
        "claude-opus-4-1",
        "claude-haiku-4-5",
        "qwen2.5-coder-32b-instruct",
        "llama-3.1-8b-instruct",
    ):
        assert required in models
    for name, spec in models.items():
        m = ModelSpec.model_validate(spec, strict=True)
        assert m.max_output_tokens is not None and m.max_output_tokens < m.context_window, name
    text = "ctxpolicy: 1\npolicies:\n" + "".join(
        f"  a{i}: {{model: {name}}}\n" for i, name in enumerate(models)
    )
    p = tmp_path / "all.yaml"
    p.write_text(text)
    assert validate_file(p, json_schema=True) == []


def test_file_models_win_over_the_catalogue(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(
        "ctxpolicy: 1\nmodels:\n  gpt-4o: {context_window: 9000}\n"
        "policies:\n  default: {model: gpt-4o}\n"
    )
    assert load_policy(p).model.context_window == 9000


def _console_examples(path: Path) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for block in blocks(path, "console"):
        cmd: str | None = None
        expected: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if cmd is not None:
                    out.append((cmd, expected))
                cmd, expected = line[2:], []
            elif cmd is not None:
                expected.append(line)
        if cmd is not None:
            out.append((cmd, expected))
    return [(c, e) for c, e in out if re.match(r"ctxpolicy (validate|explain) ", c)]


CLI_EXAMPLES = _console_examples(DOCS / "cli.md")


def test_cli_md_has_examples() -> None:
    assert len(CLI_EXAMPLES) >= 4


@pytest.mark.parametrize(("cmd", "expected"), CLI_EXAMPLES, ids=[c for c, _ in CLI_EXAMPLES])
def test_cli_md_example_is_true(cmd: str, expected: list[str], monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ctxpolicy import plugins

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(plugins.ENV_ALLOWLIST, "")  # what a plain install shows
    plugins.reset()
    try:
        result = CliRunner().invoke(main, shlex.split(cmd)[1:])
    finally:
        plugins.reset()
    lines = result.output.splitlines()
    at = 0
    for want in expected:
        if want.strip() in ("...", "…"):
            continue
        assert want in lines[at:], f"{cmd}: {want!r} not in the output (in order):\n{result.output}"
        at = lines.index(want, at) + 1
