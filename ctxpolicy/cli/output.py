"""Formatters of ``ctxpolicy validate`` results: text, json, github, sarif.

Each formatter takes a :class:`Report` (files checked and their diagnostics) and
returns the full text to print. They are pure functions so they can be unit-tested
(and reused by other commands such as ``simulate --check``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxpolicy.policy.diagnostics import CODES, Diagnostic

__all__ = [
    "FORMATS",
    "Report",
    "escape_github_data",
    "escape_github_property",
    "format_github",
    "format_json",
    "format_sarif",
    "format_text",
    "render",
]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://ctxpolicy.dev/docs/diagnostics"


@dataclass
class Report:
    """Files checked and every diagnostic found."""

    files: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    strict: bool = False

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity != "error"]

    @property
    def failed(self) -> bool:
        return bool(self.errors) or (self.strict and bool(self.warnings))

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def files_with_problems(self) -> list[str]:
        return sorted({d.file for d in self.diagnostics})

    def summary(self) -> str:
        n = len(self.files)
        files = _plural(n, "file")
        if not self.diagnostics:
            return f"{files} valid"
        bad = len(self.files_with_problems())
        text = (
            f"{_plural(len(self.errors), 'error')}, {_plural(len(self.warnings), 'warning')} "
            f"in {_plural(bad, 'file')} ({n} checked)"
        )
        if self.strict and self.warnings and not self.errors:
            text += "; --strict: warnings fail"
        return text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --------------------------------------------------------------------------- text


def format_text(report: Report) -> str:
    """``path:line:col: CODE message`` lines (+ hints), then a summary line."""
    lines = [d.format() for d in report.diagnostics]
    lines.append(report.summary())
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- json


def format_json(report: Report) -> str:
    by_file: dict[str, list[dict[str, Any]]] = {f: [] for f in report.files}
    for d in report.diagnostics:
        by_file.setdefault(d.file, []).append(d.to_dict())
    doc = {
        "version": 1,
        "valid": not report.failed,
        "strict": report.strict,
        "summary": {
            "files": len(report.files),
            "errors": len(report.errors),
            "warnings": len(report.warnings),
            "text": report.summary(),
        },
        "files": [
            {
                "path": f,
                "valid": not any(x["severity"] == "error" for x in diags),
                "diagnostics": diags,
            }
            for f, diags in by_file.items()
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- github


def escape_github_data(text: str) -> str:
    """Escape the message part of a workflow command (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_github_property(text: str) -> str:
    """Escape a property value of a workflow command (also ``:`` and ``,``)."""
    return escape_github_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(report: Report) -> str:
    """GitHub Actions annotations: ``::error file=…,line=…,col=…,title=CODE::message``."""
    lines = []
    for d in report.diagnostics:
        level = "error" if d.severity == "error" else "warning"
        message = d.message + (f"\nhint: {d.hint}" if d.hint else "")
        props = ",".join(
            f"{k}={escape_github_property(str(v))}"
            for k, v in (
                ("file", d.file),
                ("line", d.line),
                ("col", d.col),
                ("title", d.code),
            )
        )
        lines.append(f"::{level} {props}::{escape_github_data(message)}")
    lines.append(report.summary())
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- sarif


def _uri(path: str) -> str:
    p = Path(path)
    try:
        rel = os.path.relpath(p, Path.cwd()) if p.is_absolute() else str(p)
    except ValueError:  # another drive on Windows
        rel = str(p)
    if rel.startswith(".."):
        return p.resolve().as_uri()
    return Path(rel).as_posix()


def _physical(file: str, line: int, col: int) -> dict[str, Any]:
    return {
        "artifactLocation": {"uri": _uri(file)},
        "region": {"startLine": max(line, 1), "startColumn": max(col, 1)},
    }


def format_sarif(report: Report, *, version: str | None = None) -> str:
    """A SARIF 2.1.0 log with one run; rules come from :data:`CODES`."""
    seen = sorted({d.code for d in report.diagnostics})
    codes = sorted(set(CODES) | set(seen))
    index = {code: i for i, code in enumerate(codes)}
    rules = []
    for code in codes:
        severity, summary = CODES.get(code, ("error", code))
        rules.append(
            {
                "id": code,
                "name": code,
                "shortDescription": {"text": summary},
                "helpUri": f"{INFORMATION_URI}#{code.lower()}",
                "defaultConfiguration": {"level": "error" if severity == "error" else "warning"},
            }
        )
    results = []
    for d in report.diagnostics:
        text = d.message + (f" (hint: {d.hint})" if d.hint else "")
        result: dict[str, Any] = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": "error" if d.severity == "error" else "warning",
            "message": {"text": text},
            "locations": [{"physicalLocation": _physical(d.file, d.line, d.col)}],
        }
        if d.related:
            result["relatedLocations"] = [
                {
                    "id": i,
                    "physicalLocation": _physical(rel.file, rel.line, rel.col),
                    "message": {"text": rel.message},
                }
                for i, rel in enumerate(d.related, 1)
            ]
        results.append(result)
    if version is None:
        from ctxpolicy import __version__ as version
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ctxpolicy",
                        "version": version,
                        "informationUri": INFORMATION_URI,
                        "rules": rules,
                    }
                },
                "artifacts": [{"location": {"uri": _uri(f)}} for f in report.files],
                "results": results,
                "invocations": [{"executionSuccessful": True}],
            }
        ],
    }
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


FORMATS: dict[str, Callable[[Report], str]] = {
    "text": format_text,
    "json": format_json,
    "github": format_github,
    "sarif": format_sarif,
}


def render(report: Report, fmt: str) -> str:
    return FORMATS[fmt](report)
