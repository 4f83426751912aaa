"""Formatters: text, json, github annotations (escaping), SARIF 2.1.0."""

from __future__ import annotations

import json

from ctxpolicy.cli.output import (
    Report,
    escape_github_data,
    escape_github_property,
    format_github,
    format_json,
    format_sarif,
    format_text,
)
from ctxpolicy.policy.diagnostics import Diagnostic

E = Diagnostic("p/a.yaml", 3, 5, "CTX101", "error", "unknown key 'x'", "did you mean 'y'?")
W = Diagnostic("p/b.toml", 7, 1, "CTX101", "warning", "odd: 50%, really\nyes")


def report(*diags: Diagnostic, strict: bool = False) -> Report:
    return Report(
        files=["p/a.yaml", "p/b.toml", "p/c.yaml"], diagnostics=list(diags), strict=strict
    )


def test_github_data_escaping() -> None:
    assert escape_github_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_github_data("a:b,c") == "a:b,c"  # only properties escape : and ,


def test_github_property_escaping() -> None:
    assert escape_github_property("C:\\x,y%\n") == "C%3A\\x%2Cy%25%0A"


def test_github_format_lines() -> None:
    out = format_github(report(E, W)).splitlines()
    assert out[0] == (
        "::error file=p/a.yaml,line=3,col=5,title=CTX101::unknown key 'x'%0Ahint: did you mean 'y'?"
    )
    assert out[1] == "::warning file=p/b.toml,line=7,col=1,title=CTX101::odd: 50%25, really%0Ayes"
    assert out[-1] == "1 error, 1 warning in 2 files (3 checked)"


def test_github_escapes_file_property() -> None:
    d = Diagnostic("dir,x/a:b.yaml", 1, 1, "CTX101", "error", "m")
    assert format_github(report(d)).startswith("::error file=dir%2Cx/a%3Ab.yaml,line=1,col=1,")


def test_text_format_and_summary() -> None:
    out = format_text(report(E)).splitlines()
    assert out == [
        "p/a.yaml:3:5: CTX101 unknown key 'x'",
        "    hint: did you mean 'y'?",
        "1 error, 0 warnings in 1 file (3 checked)",
    ]
    assert format_text(report()).strip() == "3 files valid"
    assert Report(files=["a"]).summary() == "1 file valid"


def test_exit_codes_and_strict() -> None:
    assert report().exit_code == 0
    assert report(E).exit_code == 1
    assert report(W).exit_code == 0
    assert report(W, strict=True).exit_code == 1
    assert "--strict" in report(W, strict=True).summary()


def test_json_format() -> None:
    doc = json.loads(format_json(report(E, W)))
    assert doc["valid"] is False
    assert doc["summary"]["errors"] == 1 and doc["summary"]["warnings"] == 1
    files = {f["path"]: f for f in doc["files"]}
    assert set(files) == {"p/a.yaml", "p/b.toml", "p/c.yaml"}
    assert files["p/a.yaml"]["diagnostics"][0] == E.to_dict()
    assert files["p/b.toml"]["valid"] is True  # warnings only
    assert files["p/c.yaml"]["diagnostics"] == []


def test_sarif_structure() -> None:
    log = json.loads(format_sarif(report(E, W), version="9.9"))
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-2.1.0.json")
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ctxpolicy" and driver["version"] == "9.9"
    rule_ids = [r["id"] for r in driver["rules"]]
    assert "CTX101" in rule_ids and rule_ids == sorted(rule_ids)
    results = run["results"]
    assert [r["level"] for r in results] == ["error", "warning"]
    for r in results:
        assert driver["rules"][r["ruleIndex"]]["id"] == r["ruleId"]
        loc = r["locations"][0]["physicalLocation"]
        assert loc["region"]["startLine"] >= 1 and loc["region"]["startColumn"] >= 1
        assert not loc["artifactLocation"]["uri"].startswith("/")
    assert results[0]["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 3,
        "startColumn": 5,
    }
    assert "did you mean" in results[0]["message"]["text"]


def test_sarif_empty_run() -> None:
    log = json.loads(format_sarif(report()))
    assert log["runs"][0]["results"] == []
