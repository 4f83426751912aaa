"""docs/plugins.md documents every hookspec with its exact signature (datasette style)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from ctxpolicy.testing import hookdocs

DOCS = Path(__file__).resolve().parent.parent / "docs" / "plugins.md"
HEADING = re.compile(
    r"^### `(?P<name>ctxpolicy_\w+)\((?P<params>.*)\)(?: -> (?P<ret>.+))?`$", re.MULTILINE
)
REGENERATE = "regenerate with: python -m ctxpolicy.testing.hookdocs --write"


def split_params(text: str) -> list[str]:
    """Top-level comma-separated parameters (commas inside brackets do not split)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def documented() -> dict[str, re.Match[str]]:
    return {m["name"]: m for m in HEADING.finditer(DOCS.read_text(encoding="utf-8"))}


SPECS = hookdocs.hookspecs()


def test_there_are_hookspecs() -> None:
    assert "ctxpolicy_register_layers" in SPECS and "ctxpolicy_event" in SPECS


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hookspec_is_documented(name: str) -> None:
    assert name in documented(), f"hook {name} is missing from docs/plugins.md; {REGENERATE}"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_documented_signature_matches_code(name: str) -> None:
    doc = documented().get(name)
    if doc is None:
        pytest.fail(f"hook {name} is missing from docs/plugins.md; {REGENERATE}")
    sig = inspect.signature(SPECS[name])
    params = [p.split(":")[0].split("=")[0].strip() for p in split_params(doc["params"])]
    assert params == list(sig.parameters), (
        f"{name}: documented arguments differ from the code; {REGENERATE}"
    )
    assert f"{name}({doc['params']})" + (f" -> {doc['ret']}" if doc["ret"] else "") == (
        hookdocs.format_signature(SPECS[name])
    ), f"{name}: documented signature differs from the code; {REGENERATE}"


def test_no_documented_hook_without_a_spec() -> None:
    stale = sorted(set(documented()) - set(SPECS))
    assert not stale, f"docs/plugins.md documents hooks that do not exist: {stale}; {REGENERATE}"


def test_every_hookspec_has_a_docstring() -> None:
    for name, fn in SPECS.items():
        doc = inspect.getdoc(fn) or ""
        assert "Called" in doc and "firstresult" in doc, (
            f"{name}: say when it is called and if firstresult"
        )


def test_reference_section_is_fresh() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert hookdocs.replace_section(text, hookdocs.reference()) == text, (
        f"the hook reference in docs/plugins.md is stale; {REGENERATE}"
    )


def test_check_mode(tmp_path: Path) -> None:
    stale = tmp_path / "plugins.md"
    stale.write_text(f"# x\n\n{hookdocs.START}\nold\n{hookdocs.END}\n")
    assert hookdocs.main(["--check", "--docs", str(stale)]) == 1
    assert hookdocs.main(["--write", "--docs", str(stale)]) == 0
    assert hookdocs.main(["--check", "--docs", str(stale)]) == 0
    assert stale.read_text().startswith("# x\n\n")
    assert "ctxpolicy_register_layers" in stale.read_text()
