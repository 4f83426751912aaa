"""Each integration page's install line installs what its example imports: the page's
extra, with its dependencies as installed, provides the provider package the example
(or the page's "against a real provider" line) uses."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]

#: (page, its extra, what the page imports or names, the distribution providing it)
NEEDS = [
    ("google_adk", "google_adk", "google.adk.models.lite_llm import LiteLlm", "litellm"),
    ("pydantic_ai", "pydantic_ai", "OpenAIChatModel", "openai"),
    ("strands", "strands", "strands.models.openai import OpenAIModel", "openai"),
    ("langchain", "langchain", "ChatOpenAI", "langchain-openai"),
]


def _extra(name: str) -> list[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return list(data["project"]["optional-dependencies"][name])


def closure(requirements: list[str]) -> set[str]:
    """Every distribution ``requirements`` install (installed metadata, markers
    evaluated with the extras asked for)."""
    seen: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, via_extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": via_extra}):
            continue
        name = canonicalize_name(req.name)
        if name == "ctxpolicy":  # ctxpolicy[x]: the extras of this project
            for extra in req.extras:
                todo.extend((Requirement(r), "") for r in _extra(extra))
            continue
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for r in requires:
            sub = Requirement(r)
            for extra in ("", *req.extras):
                if sub.marker is None or sub.marker.evaluate({"extra": extra}):
                    todo.append((sub, extra))
                    break
    return {k.split("[")[0] for k in seen}


@pytest.mark.parametrize(("page", "extra", "named", "dist"), NEEDS)
def test_the_install_line_installs_what_the_page_uses(
    page: str, extra: str, named: str, dist: str
) -> None:
    text = (ROOT / "docs" / "integrations" / f"{page}.md").read_text(encoding="utf-8")
    assert f"pip install './ctxpolicy[{extra}]'" in text
    assert named in text  # the table above is still what the page shows
    installed = closure(_extra(extra))
    assert canonicalize_name(dist) in installed, (
        f"ctxpolicy[{extra}] does not install {dist}, which the page uses ({named})"
    )
