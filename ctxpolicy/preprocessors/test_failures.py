"""``test_failures``: a test run reduced to its summary and its failures.

Design B's ``run_tests`` rule, for pytest, unittest, jest, vitest, go test and
cargo test output (several in one result are fine: each parser contributes).
The result is::

    [test_failures: pytest: 3 failed, 47 passed in 1.23s]
    FAILED tests/test_api.py::test_status
      >       assert resp.status == 200
      E       assert 500 == 200
      tests/test_api.py:42: AssertionError

one block per failure — its name, assertion lines and location — up to
``max_failures`` detailed blocks; the names of the remaining failures are still
all listed. A passing run collapses to its summary line(s). With
``keep_failed_only: false`` skipped / xfailed tests are listed as well.
Output nobody recognises falls back to design B's keyword filter, then head/tail.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import Field

from ctxpolicy.components import Preprocessor, ToolCall
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions, TuneRange
from ctxpolicy.preprocessors._text import ANSI_RE, cut_chars, head_tail_chars, never_longer
from ctxpolicy.preprocessors.head_tail import fallback_field


class TestFailuresOptions(ComponentOptions):
    """Options of ``test_failures``."""

    __test__ = False  # not a pytest test class

    keep_failed_only: bool = Field(
        default=True,
        description="List failed/errored tests only; false also lists skipped/xfailed ones.",
    )
    max_failures: int = Field(
        default=30, ge=0, description="Failures shown with details; the others by name only."
    )
    max_detail_lines: int = Field(
        default=12, ge=0, description="Assertion/location lines kept per failure."
    )
    fallback_chars: int = fallback_field("no test output is recognised")


@dataclass
class Failure:
    name: str
    details: list[str] = field(default_factory=list)
    kind: str = "FAILED"


@dataclass
class Parsed:
    framework: str
    summary: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # skipped / xfail lines

    def add(self, name: str, details: Sequence[str] = (), kind: str = "FAILED") -> Failure:
        for f in self.failures:
            if f.name == name:
                if kind != "FAILED":
                    f.kind = kind
                for d in details:
                    if d not in f.details:
                        f.details.append(d)
                return f
        f = Failure(name, list(details), kind)
        self.failures.append(f)
        return f


def _dedupe(xs: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(x for x in xs if x))


# --------------------------------------------------------------------------- pytest

_PY_SUMMARY = re.compile(
    r"^=*\s*(?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun)"
    r"(?:, )?)+.*\bin [\d.]+s\b.*?=*\s*$|^=+ no tests ran.*=+$"
)
_PY_SECTION_HDR = re.compile(r"^=+ (FAILURES|ERRORS) =+$")
_PY_ANY_HDR = re.compile(r"^=+ .* =+$")
_PY_TEST_HDR = re.compile(r"^_{3,} (.+?) _{3,}$")
_PY_SHORT = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")
_PY_VERBOSE = re.compile(r"^(\S+::\S+) (FAILED|ERROR)\b")
_PY_OTHER = re.compile(r"^(SKIPPED|XFAIL|XPASS) ")
_PY_LOC = re.compile(r"^(\S+?\.py):(\d+): (\w+)")


def parse_pytest(lines: Sequence[str]) -> Parsed | None:
    p = Parsed("pytest")
    p.summary = [ln.strip("= ").strip() for ln in lines if _PY_SUMMARY.match(ln)]
    sections: dict[str, list[str]] = {}
    in_fail = False
    current: list[str] | None = None
    for ln in lines:
        if _PY_SECTION_HDR.match(ln):
            in_fail, current = True, None
            continue
        if _PY_ANY_HDR.match(ln):
            in_fail, current = False, None
            continue
        if not in_fail:
            continue
        m = _PY_TEST_HDR.match(ln)
        if m:
            current = sections.setdefault(m.group(1), [])
            continue
        if current is not None:
            current.append(ln)
    shorts: list[tuple[str, str | None, str]] = []
    for ln in lines:
        m = _PY_SHORT.match(ln) or None
        if m:
            shorts.append((m.group(2), m.group(3), m.group(1)))
            continue
        m2 = _PY_VERBOSE.match(ln)
        if m2:
            shorts.append((m2.group(1), None, m2.group(2)))
        elif _PY_OTHER.match(ln):
            p.others.append(ln)
    if not p.summary and not sections and not shorts:
        return None
    if not (p.summary or any("::" in s for s, _, _ in shorts) or sections):
        return None

    def nodeid_for(section: str) -> str:
        key = section.replace("ERROR at setup of ", "").replace("ERROR at teardown of ", "")
        key = key.replace(".", "::")
        for nodeid, _, _ in shorts:
            if nodeid == key or nodeid.endswith("::" + key):
                return nodeid
        return section

    for sec, body in sections.items():
        details: list[str] = []
        source = next((b for b in body if b.startswith(">")), None)
        if source:
            details.append(source.rstrip())
        details.extend(b.rstrip() for b in body if b.startswith("E ") or b == "E")
        locs = [b for b in body if _PY_LOC.match(b)]
        if locs:
            details.append(locs[-1])
        kind = "ERROR" if sec.startswith("ERROR at ") else "FAILED"
        p.add(nodeid_for(sec), details, kind)
    for nodeid, msg, kind in shorts:
        known = any(f.name == nodeid for f in p.failures)
        p.add(nodeid, [msg] if msg and not known else [], kind)
    return p


# --------------------------------------------------------------------------- unittest

_UT_HDR = re.compile(r"^(FAIL|ERROR|UNEXPECTED SUCCESS): (\S+)(?: \((.+?)\))?")
_UT_RAN = re.compile(r"^Ran \d+ tests? in ")
_UT_RESULT = re.compile(r"^(OK|FAILED)\b( \(.*\))?$")
_UT_FILE = re.compile(r'^\s*File "(.+?)", line (\d+), in (\S+)')
_UT_SKIP = re.compile(r"^(\S+) \((.+?)\) \.\.\. skipped")


def parse_unittest(lines: Sequence[str]) -> Parsed | None:
    if not any(_UT_RAN.match(ln) for ln in lines) and not any(_UT_HDR.match(ln) for ln in lines):
        return None
    p = Parsed("unittest")
    p.summary = [ln for ln in lines if _UT_RAN.match(ln) or _UT_RESULT.match(ln)]
    i = 0
    while i < len(lines):
        m = _UT_HDR.match(lines[i])
        if not m:
            if _UT_SKIP.match(lines[i]):
                p.others.append(lines[i])
            i += 1
            continue
        name = f"{m.group(3)}" if m.group(3) else m.group(2)
        if m.group(3) and not m.group(3).endswith(m.group(2)):
            name = f"{m.group(3)}.{m.group(2)}"
        body: list[str] = []
        i += 1
        while i < len(lines) and not _UT_HDR.match(lines[i]) and not _UT_RAN.match(lines[i]):
            if re.match(r"^={20,}$", lines[i]):
                break
            body.append(lines[i])
            i += 1
        files = [j for j, b in enumerate(body) if _UT_FILE.match(b)]
        details: list[str] = []
        if files:
            j = files[-1]
            details.append(body[j].strip())
            if j + 1 < len(body) and body[j + 1].strip() and not _UT_FILE.match(body[j + 1]):
                details.append("  " + body[j + 1].strip())
        content = [b for b in body if b.strip() and not re.match(r"^-{20,}$", b)]
        tail_msg = [b for b in content if re.match(r"^\w[\w.]*(Error|Exception|Failure)\b", b)]
        if tail_msg:
            k = content.index(tail_msg[-1])
            details.extend(content[k : k + 4])
        elif content:
            details.append(content[-1])
        p.add(name, details, "ERROR" if m.group(1) == "ERROR" else "FAILED")
    if not p.summary and not p.failures:
        return None
    return p


# --------------------------------------------------------------------------- go

_GO_FAIL = re.compile(r"^(\s*)--- FAIL: (\S+)")
_GO_SKIP = re.compile(r"^\s*--- SKIP: (\S+)")
_GO_SUM = re.compile(r"^(ok|FAIL|PASS)(\s+\S+.*)?$|^FAIL\t")
_GO_STOP = re.compile(r"^\s*(--- (PASS|FAIL|SKIP)|=== (RUN|PAUSE|CONT|NAME))|^(ok|FAIL|PASS)\b")


def parse_go(lines: Sequence[str]) -> Parsed | None:
    if not any(_GO_FAIL.match(ln) or re.match(r"^(ok|FAIL)\s+\S+\s", ln) for ln in lines):
        return None
    p = Parsed("go test")
    oks = [ln for ln in lines if re.match(r"^ok\s+\S+", ln)]
    fails = [ln for ln in lines if re.match(r"^FAIL(\s|$)", ln)]
    p.summary = _dedupe(fails + ([f"ok: {len(oks)} packages"] if oks else []))
    run_logs: dict[str, list[str]] = {}
    current: str | None = None
    for ln in lines:  # -v output: t.Log/t.Error lines stream under "=== RUN   name"
        m = re.match(r"^=== (?:RUN|CONT|NAME)\s+(\S+)", ln)
        if m:
            current = m.group(1)
            continue
        if _GO_STOP.match(ln):
            current = None
            continue
        if current is not None and ln.strip():
            run_logs.setdefault(current, []).append(ln.strip())
    for i, ln in enumerate(lines):
        m = _GO_FAIL.match(ln)
        if m:
            details = list(run_logs.get(m.group(2), []))
            for nxt in lines[i + 1 :]:
                if _GO_STOP.match(nxt):
                    break
                if nxt.strip():
                    details.append(nxt.strip())
            p.add(m.group(2), details)
        elif _GO_SKIP.match(ln):
            p.others.append(ln.strip())
        elif ln.startswith("panic: "):
            p.add("panic", [ln] + [x.strip() for x in lines[i + 1 : i + 8] if x.strip()])
    return p


# --------------------------------------------------------------------------- cargo

_CARGO_LINE = re.compile(r"^test (\S+) \.\.\. (FAILED|ok|ignored)")
_CARGO_SECTION = re.compile(r"^---- (\S+) stdout ----$")
_CARGO_RESULT = re.compile(r"^test result: ")


def parse_cargo(lines: Sequence[str]) -> Parsed | None:
    if not any(_CARGO_RESULT.match(ln) or _CARGO_LINE.match(ln) for ln in lines):
        return None
    p = Parsed("cargo test")
    p.summary = [ln for ln in lines if _CARGO_RESULT.match(ln)]
    for i, ln in enumerate(lines):
        m = _CARGO_SECTION.match(ln)
        if m:
            details: list[str] = []
            for nxt in lines[i + 1 :]:
                if _CARGO_SECTION.match(nxt) or nxt.strip() in ("failures:", "successes:"):
                    break
                if nxt.startswith("note: run with `RUST_BACKTRACE"):
                    continue
                if nxt.strip():
                    details.append(nxt.rstrip())
            p.add(m.group(1), details)
    for ln in lines:
        m = _CARGO_LINE.match(ln)
        if m and m.group(2) == "FAILED":
            p.add(m.group(1))
        elif m and m.group(2) == "ignored":
            p.others.append(ln)
    return p


# --------------------------------------------------------------------------- jest / vitest

_JEST_HDR = re.compile(r"^\s*● (.+)$")
_JEST_SUM = re.compile(r"^\s*(Tests|Test Suites|Snapshots|Time):\s+")
_VITEST_HDR = re.compile(r"^\s*(?:FAIL|×|✗)\s+(\S+\.\w+\s+>\s+.+?)(?:\s+\d+ms)?$")
_VITEST_SUM = re.compile(r"^\s*(Test Files|Tests|Duration)\s{2,}\S")
_JS_DETAIL = re.compile(
    r"(expect\(|Expected|Received|AssertionError|Error:|^\s*[-+] (Expected|Received)|^\s*>\s*\d+\s*\|)"
)
_JS_LOC = re.compile(r"(?:\bat .*?\(?|❯ )((?:[\w./@-]+/)?[\w.@-]+\.(?:[cm]?[jt]sx?)):(\d+):(\d+)")


def _js_blocks(
    lines: Sequence[str], hdr: re.Pattern[str], stop: Callable[[str], bool]
) -> list[Failure]:
    out: list[Failure] = []
    for i, ln in enumerate(lines):
        m = hdr.match(ln)
        if not m:
            continue
        details: list[str] = []
        loc: str | None = None
        for nxt in lines[i + 1 :]:
            if hdr.match(nxt) or stop(nxt):
                break
            if "node_modules" in nxt:
                continue
            if _JS_DETAIL.search(nxt):
                details.append(nxt.strip())
            elif loc is None and _JS_LOC.search(nxt):
                loc = nxt.strip()
        if loc:
            details.append(loc)
        out.append(Failure(m.group(1).strip(), _dedupe(details)))
    return out


def parse_jest(lines: Sequence[str]) -> Parsed | None:
    if not any(_JEST_SUM.match(ln) for ln in lines) and not any(
        _JEST_HDR.match(ln) for ln in lines
    ):
        return None
    p = Parsed("jest")
    p.summary = [
        ln.strip() for ln in lines if _JEST_SUM.match(ln) and not ln.strip().startswith("Time")
    ]
    for f in _js_blocks(lines, _JEST_HDR, lambda s: bool(_JEST_SUM.match(s))):
        p.add(f.name, f.details)
    return p if p.summary or p.failures else None


def parse_vitest(lines: Sequence[str]) -> Parsed | None:
    if not any(_VITEST_SUM.match(ln) for ln in lines):
        return None
    p = Parsed("vitest")
    p.summary = [ln.strip() for ln in lines if _VITEST_SUM.match(ln) and "Duration" not in ln]
    for f in _js_blocks(lines, _VITEST_HDR, lambda s: bool(_VITEST_SUM.match(s))):
        p.add(f.name, f.details)
    return p


PARSERS: tuple[Callable[[Sequence[str]], Parsed | None], ...] = (
    parse_pytest,
    parse_unittest,
    parse_go,
    parse_cargo,
    parse_vitest,
    parse_jest,
)


def parse(text: str) -> list[Parsed]:
    clean = ANSI_RE.sub("", text)
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in clean.split("\n")]
    found: list[Parsed] = []
    for parser in PARSERS:
        try:
            res = parser(lines)
        except (re.error, RecursionError, IndexError, ValueError):  # pragma: no cover
            res = None
        if res is not None and (res.summary or res.failures):
            if res.framework == "jest" and any(f.framework == "vitest" for f in found):
                continue
            found.append(res)
    return found


_KEYWORD = re.compile(r"FAIL|ERROR|Error|failed|panicked|assert", re.ASCII)


class TestFailures(Preprocessor):
    name = "test_failures"
    description = "Test runs (pytest, unittest, jest, vitest, go, cargo) → summary + each failure."
    Options = TestFailuresOptions
    tune_space: ClassVar[dict[str, TuneRange]] = {
        "max_failures": TuneRange(low=1, high=30),
        "max_detail_lines": TuneRange(low=5, high=80, step=5),
    }

    options: TestFailuresOptions

    __test__ = False  # not a pytest test class

    def process(self, text: str, call: ToolCall | None = None) -> str:
        opts = self.options
        runs = parse(text)
        if not runs:
            return never_longer(text, self._fallback(text))
        out: list[str] = []
        detailed = 0
        names_only: list[str] = []
        for run in runs:
            summary = "; ".join(_dedupe(run.summary)) or f"{len(run.failures)} failed"
            out.append(f"[test_failures: {run.framework}: {cut_chars(summary, 400)}]")
            for f in run.failures:
                if detailed >= opts.max_failures:
                    names_only.append(f.name)
                    continue
                detailed += 1
                out.append(f"{f.kind} {f.name}")
                out.extend("  " + cut_chars(d, 300) for d in f.details[: opts.max_detail_lines])
            if not opts.keep_failed_only:
                out.extend(cut_chars(o, 300) for o in run.others)
        if names_only:
            out.append(f"... and {len(names_only)} more failures: " + ", ".join(names_only))
        return never_longer(text, "\n".join(out))

    def _fallback(self, text: str) -> str:
        lines = ANSI_RE.sub("", text).split("\n")
        hits = [ln for ln in lines if _KEYWORD.search(ln)]
        if not hits:
            return head_tail_chars(text, self.options.fallback_chars)
        kept = [cut_chars(h, 300) for h in hits[:30]]
        tail = [ln for ln in lines[-5:] if ln.strip() and ln not in kept]
        return head_tail_chars(
            "[test_failures: output not recognised; lines mentioning failures]\n"
            + "\n".join(kept + tail),
            self.options.fallback_chars,
        )


@hookimpl
def ctxpolicy_register_preprocessors(register):  # type: ignore[no-untyped-def]
    register(TestFailures)
