"""Golden tests of the built-in preprocessors on realistic tool outputs.

Small outputs live in tests/data/tool_outputs/; the big ones (a 10 MB log, a 5 MB
JSON document) are generated in tmp_path at test time.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from ctxpolicy.preprocessors.command_output import CommandOutput, CommandOutputOptions
from ctxpolicy.preprocessors.head_tail import HeadTail, HeadTailOptions
from ctxpolicy.preprocessors.head_tail_lines import HeadTailLines, HeadTailLinesOptions
from ctxpolicy.preprocessors.json_prune import JsonPrune, JsonPruneOptions
from ctxpolicy.preprocessors.log_levels import LogLevels, LogLevelsOptions
from ctxpolicy.preprocessors.redact import Redact, RedactOptions
from ctxpolicy.preprocessors.table_rows import TableRows, TableRowsOptions
from ctxpolicy.preprocessors.test_failures import TestFailures, TestFailuresOptions

DATA = Path(__file__).parent.parent / "data" / "tool_outputs"


def load(name: str) -> str:
    with open(DATA / name, encoding="utf-8", newline="") as fh:
        return fh.read()


# --------------------------------------------------------------------------- test_failures

PYTEST_FAILED = [
    "tests/test_api.py::test_api_03",
    "tests/test_models.py::test_models_07",
    "tests/test_cli.py::test_cli_08",
    "tests/test_db.py::test_db_04",
]


def test_pytest_failures_exact() -> None:
    text = load("pytest_50_failures.txt")
    out = TestFailures().process(text, None)
    lines = out.split("\n")
    assert lines[0] == "[test_failures: pytest: 4 failed, 43 passed, 2 skipped, 1 error in 3.21s]"
    assert lines[1:5] == [
        "ERROR tests/test_utils.py::test_utils_01",
        '  >       conn = connect(os.environ["DATABASE_URL"])',
        "  E       KeyError: 'DATABASE_URL'",
        "  tests/conftest.py:14: KeyError",
    ]
    assert lines[5:10] == [
        "FAILED tests/test_api.py::test_api_03",
        "  >       assert resp.status_code == 200",
        "  E       assert 500 == 200",
        "  E        +  where 500 = <Response [500]>.status_code",
        "  tests/test_api.py:20: AssertionError",
    ]
    for name in PYTEST_FAILED:
        assert f"FAILED {name}" in lines
    assert "debug: calling run()" not in out and "PASSED" not in out
    assert len(out) < len(text) * 0.4


def test_pytest_max_failures_keeps_every_name() -> None:
    out = TestFailures(TestFailuresOptions(max_failures=2)).process(
        load("pytest_50_failures.txt"), None
    )
    assert out.count("\nFAILED ") + out.count("\nERROR ") == 2
    for name in PYTEST_FAILED:
        assert name in out


def test_pytest_passing_run_collapses_to_summary() -> None:
    assert (
        TestFailures().process(load("pytest_50_pass.txt"), None)
        == "[test_failures: pytest: 50 passed in 2.04s]"
    )


def test_pytest_keep_failed_only_false_lists_skips() -> None:
    text = load("pytest_50_failures.txt") + "SKIPPED [2] tests/test_api.py:90: needs network\n"
    assert "SKIPPED [2]" not in TestFailures().process(text, None)
    assert "SKIPPED [2]" in TestFailures(TestFailuresOptions(keep_failed_only=False)).process(
        text, None
    )


def test_pytest_quiet_short_summary_only() -> None:
    text = "\n".join(
        [
            "." * 40 + "F" * 2,
            "FAILED t/test_a.py::test_x - assert 1 == 2",
            "FAILED t/test_a.py::test_y",
            "2 failed, 40 passed in 0.50s",
        ]
    )
    out = TestFailures().process(text, None)
    assert out.split("\n") == [
        "[test_failures: pytest: 2 failed, 40 passed in 0.50s]",
        "FAILED t/test_a.py::test_x",
        "  assert 1 == 2",
        "FAILED t/test_a.py::test_y",
    ] or len(out) <= len(text)


RUNNER_OUTPUTS = {
    "unittest": [
        "[test_failures: unittest: Ran 5 tests in 0.003s; FAILED (failures=1, errors=1, skipped=1)]",
        "ERROR test_calc.CalcTest.test_div",
        '  File "/src/calc.py", line 8, in div',
        "    return a / b",
        "  ZeroDivisionError: division by zero",
        "FAILED test_calc.CalcTest.test_mul",
        '  File "/src/test_calc.py", line 15, in test_mul',
        "    self.assertEqual(mul(2, 3), 6)",
        "  AssertionError: 5 != 6",
    ],
    "go_test": [
        "[test_failures: go test: FAIL; FAIL\texample.com/num\t0.004s; ok: 2 packages]",
        "FAILED TestRound",
        "FAILED TestRound/negative",
        "  round_test.go:27: Round(-2.5) = -2, want -3",
        "FAILED TestFormat",
        '  format_test.go:14: got "1,000" want "1000"',
    ],
    "cargo_test": [
        "[test_failures: cargo test: test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s]",
        "FAILED tests::divides",
        "  thread 'tests::divides' panicked at src/lib.rs:21:9:",
        "  assertion `left == right` failed",
        "    left: 3",
        "   right: 4",
    ],
}


@pytest.mark.parametrize("runner", sorted(RUNNER_OUTPUTS))
def test_runner_failures_exact(runner: str) -> None:
    """The whole output for a runner's failures (``<runner>_failures.txt``)."""
    out = TestFailures().process(load(f"{runner}_failures.txt"), None)
    assert out.split("\n") == RUNNER_OUTPUTS[runner]


def test_jest() -> None:
    out = TestFailures().process(load("jest_failures.txt"), None)
    assert out.split("\n")[1:] == [
        "FAILED Cart › computes total with tax",
        "  expect(received).toBe(expected) // Object.is equality",
        "  Expected: 10.8",
        "  Received: 10",
        "  > 13 |   expect(cart.total()).toBe(10.8);",
        "  at Object.toBe (src/cart.test.js:13:24)",
    ]
    assert "Tests:       1 failed, 5 passed, 6 total" in out.split("\n")[0]


def test_vitest() -> None:
    out = TestFailures().process(load("vitest_failures.txt"), None)
    lines = out.split("\n")
    assert (
        lines[0]
        == "[test_failures: vitest: Test Files  1 failed (1); Tests  1 failed | 2 passed (3)]"
    )
    assert lines[1] == "FAILED src/math.test.ts > math > divides"
    assert "  AssertionError: expected 2 to be 3 // Object.is equality" in lines
    assert "  ❯ src/math.test.ts:9:22" in lines


def test_unrecognised_output_uses_keywords() -> None:
    text = "building...\n" * 300 + "Something FAILED badly\n" + "done\n"
    out = TestFailures().process(text, None)
    assert "Something FAILED badly" in out and len(out) < 200


# --------------------------------------------------------------------------- head_tail_lines


def test_head_tail_lines_1000_line_file() -> None:
    text = load("read_file_1000_lines.py")
    src = text.split("\n")
    out = HeadTailLines().process(text, None).split("\n")
    assert len(out) == 101
    assert out[:50] == [f"{i + 1}: {src[i]}" for i in range(50)]
    assert out[50] == "... [lines 51-950 omitted (900 of 1000 lines)] ..."
    assert out[51:] == [f"{i + 1}: {src[i]}" for i in range(950, 1000)]


def test_head_tail_lines_threshold_and_max_lines() -> None:
    small = "\n".join(f"l{i}" for i in range(200))
    assert HeadTailLines().process(small, None) == small
    text = load("read_file_1000_lines.py")
    assert HeadTailLines(HeadTailLinesOptions(max_lines=1000)).process(text, None) == text
    out = HeadTailLines(HeadTailLinesOptions(max_lines=60)).process(text, None).split("\n")
    assert len(out) == 61 and out[30] == "... [lines 31-970 omitted (940 of 1000 lines)] ..."
    tiny = "\n".join("abcdefghi")  # cutting would not make it shorter: unchanged
    assert HeadTailLines(HeadTailLinesOptions(lines=5, min_lines=8)).process(tiny, None) == tiny


# --------------------------------------------------------------------------- log_levels


def make_big_log(path: Path, size: int = 10 * 1024 * 1024) -> tuple[list[str], list[str]]:
    rnd = random.Random(10)
    errors: list[str] = []
    warns: list[str] = []
    with open(path, "w", encoding="utf-8") as fh:
        written = 0
        n = 0
        while written < size:
            n += 1
            ts = f"2024-05-01T12:{(n // 60) % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z"
            if n % 40_000 == 7:
                line = f"{ts} ERROR [worker-{n % 8}] payment {n} failed: upstream timeout after 30s"
                errors.append(line)
            elif n % 25_000 == 11:
                line = f"{ts} WARNING [worker-{n % 8}] retry queue depth {rnd.randint(100, 999)}"
                warns.append(line)
            else:
                line = f"{ts} INFO [worker-{n % 8}] handled request id={n} path=/api/items/{rnd.randint(1, 99999)} in {rnd.randint(1, 90)}ms"
            fh.write(line + "\n")
            written += len(line) + 1
    return errors, warns


def test_log_levels_10mb(tmp_path: Path) -> None:
    errors, warns = make_big_log(tmp_path / "app.log")
    text = (tmp_path / "app.log").read_text("utf-8")
    assert len(text) >= 10 * 1024 * 1024 and 0 < len(errors) + len(warns) <= 50
    out = LogLevels().process(text, None)
    lines = out.split("\n")
    total = text.count("\n")
    assert lines[0] == (
        f"[log_levels: {total} lines; ERROR: {len(errors)}, WARN: {len(warns)}, FATAL: 0, CRITICAL: 0; "
        f"{len(errors) + len(warns)} matching lines]"
    )
    kept = [re.sub(r"^\d+: ", "", ln) for ln in lines[1:]]
    assert sorted(kept) == sorted(
        errors + warns
    )  # every ERROR and WARN line survives, nothing else
    assert len(out) < 6000


def test_log_levels_last_and_pattern() -> None:
    text = "\n".join(f"E{i} ERROR boom {i}" if i % 2 else f"I{i} INFO ok" for i in range(200))
    out = LogLevels(LogLevelsOptions(last=3)).process(text, None).split("\n")
    assert (
        out[0]
        == "[log_levels: 200 lines; ERROR: 100, WARN: 0, FATAL: 0, CRITICAL: 0; showing the last 3 of 100 matching lines]"
    )
    assert out[1:] == [
        "196: E195 ERROR boom 195",
        "198: E197 ERROR boom 197",
        "200: E199 ERROR boom 199",
    ]
    custom = "\n".join(["<3>kernel: oops", "<6>kernel: fine"] * 100)
    out = LogLevels(LogLevelsOptions(pattern=r"^<(?P<level>\d)>", levels=["3"])).process(
        custom, None
    )
    assert out.startswith("[log_levels: 200 lines; 3: 100; showing the last 50 of 100")
    none = "all good\n" * 1000
    assert (
        LogLevels()
        .process(none, None)
        .startswith("[log_levels: 1000 lines; none at ERROR/WARN/FATAL/CRITICAL]")
    )


def test_log_levels_bad_pattern_rejected() -> None:
    with pytest.raises(ValueError):
        LogLevelsOptions(pattern="(")
    with pytest.raises(ValueError):
        LogLevelsOptions(pattern="ERROR")  # no group


# --------------------------------------------------------------------------- command_output


def test_command_output_progress_and_repeats() -> None:
    text = load("pip_install_progress.txt")
    out = CommandOutput().process(text, None).split("\n")
    assert out[:5] == [
        "[exit code 1]",
        "Collecting requests",
        "  Downloading requests-2.32.0.tar.gz (100%)",
        "WARNING: retrying (Retry(total=4)) after connection broken",
        "… line repeated 312 times",
    ]
    assert "\x1b" not in "\n".join(out) and "\r" not in "\n".join(out)
    assert out[-2:] == ["error: subprocess-exited-with-error", "exit code: 1"]
    assert any(ln.startswith("... [lines ") for ln in out)


def test_command_output_structured_stderr_first() -> None:
    obj = {
        "exit_code": 2,
        "stdout": "\n".join(f"out {i}" for i in range(500)),
        "stderr": "fatal: not a git repository",
    }
    out = CommandOutput(CommandOutputOptions(head_lines=3, tail_lines=2)).process(
        json.dumps(obj), None
    )
    assert out.split("\n") == [
        "[exit code 2]",
        "[stderr]",
        "fatal: not a git repository",
        "[stdout]",
        "out 0",
        "out 1",
        "out 2",
        "... [lines 4-498 omitted (495 lines)] ...",
        "out 498",
        "out 499",
    ]


# --------------------------------------------------------------------------- table_rows


def test_psql_table() -> None:
    text = load("psql_250_rows.txt")
    src = text.split("\n")
    out = TableRows().process(text, None).split("\n")
    assert out[0] == "[table_rows: psql, 250 rows × 5 columns; showing first 20]"
    assert out[1:23] == src[:22]  # header, separator, first 20 rows exactly as printed
    assert out[23:25] == ["... [230 more rows] ...", "(250 rows)"]
    assert out[25] == "column summary (all rows):"
    assert out[26] == "  id: distinct=250 min=1 max=250"
    assert out[28] == "  city: distinct=6 min=Berlin max=Turin"


def test_markdown_and_csv_and_json_tables() -> None:
    md = (
        TableRows(TableRowsOptions(max_rows=5))
        .process(load("markdown_60_rows.md"), None)
        .split("\n")
    )
    assert md[0] == "[table_rows: markdown, 60 rows × 3 columns; showing first 5]"
    assert md[1:3] == ["| id | city | total |", "|---:|------|------:|"]
    csv_out = TableRows(TableRowsOptions(max_rows=3, summarize_large_result=False)).process(
        load("csv_120_rows.csv"), None
    )
    assert csv_out.split("\n") == [
        "[table_rows: csv, 120 rows × 4 columns; showing first 3]",
        "id,email,city,total",
        *load("csv_120_rows.csv").split("\n")[1:4],
        "... [117 more rows] ...",
    ]
    rows = [{"id": i, "name": f"n{i}", "score": None if i % 10 == 0 else i / 2} for i in range(100)]
    js = TableRows(TableRowsOptions(max_rows=2)).process(json.dumps(rows), None).split("\n")
    assert js[:5] == [
        "[table_rows: json, 100 rows × 3 columns; showing first 2]",
        'columns: ["id", "name", "score"]',
        '{"id": 0, "name": "n0", "score": null}',
        '{"id": 1, "name": "n1", "score": 0.5}',
        "... [98 more rows] ...",
    ]
    assert "  score: distinct=90 min=0.5 max=49.5 nulls=10" in js
    small = "a,b\n1,2\n"
    assert TableRows().process(small, None) == small


# --------------------------------------------------------------------------- json_prune


def test_json_prune_5mb(tmp_path: Path) -> None:
    rnd = random.Random(5)
    doc = {
        "meta": {"query": "orders", "page": 1, "note": "x" * 1000},
        "items": [
            {
                "id": i,
                "sku": f"SKU-{rnd.randint(1000, 9999)}",
                "tags": ["a", "b", "c"] * 5,
                "desc": "lorem ipsum " * 20,
            }
            for i in range(15_000)
        ],
    }
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc), "utf-8")
    text = path.read_text("utf-8")
    assert len(text) >= 5 * 1024 * 1024
    out = JsonPrune().process(text, None)
    pruned = json.loads(out)  # still valid JSON
    assert set(pruned) == {"meta", "items"} and pruned["meta"]["query"] == "orders"
    assert len(pruned["items"]) == 11 and pruned["items"][-1] == "… 14990 more items"
    assert pruned["items"][0]["id"] == 0 and pruned["items"][0]["tags"][-1] == "… 5 more items"
    assert pruned["meta"]["note"] == "x" * 200 + "… [+800 chars]"
    assert len(out) < 20_000
    deep = JsonPrune(JsonPruneOptions(max_depth=2)).process(text, None)
    assert json.loads(deep)["items"][0] == "{… 4 keys}"


def test_json_prune_not_json() -> None:
    assert JsonPrune().process("not json", None) == "not json"
    assert (
        JsonPrune(JsonPruneOptions(fallback_chars=10))
        .process("x" * 100, None)
        .startswith("xxxxx\n... [90 chars omitted]")
    )


# --------------------------------------------------------------------------- head_tail


def test_head_tail_chars_and_tokens() -> None:
    text = "".join(chr(65 + i % 26) for i in range(10_000))
    out = HeadTail().process(text, None)
    assert out == text[:1500] + "\n... [7000 chars omitted] ...\n" + text[-1500:]
    assert HeadTail().process("short", None) == "short"
    out = HeadTail(HeadTailOptions(max_tokens=100)).process(text, None)
    assert (
        out.startswith(text[:200]) and out.endswith(text[-200:]) and "[9600 chars omitted]" in out
    )
    cjk = "中" * 1000
    out = HeadTail(HeadTailOptions(max_tokens=100)).process(cjk, None)
    assert out == "中" * 50 + "\n... [900 chars omitted] ...\n" + "中" * 50


# --------------------------------------------------------------------------- redact


def test_redact_preprocessor() -> None:
    text = (
        "OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx\n"
        "aws AKIAIOSFODNN7EXAMPLE\n"
        "token ghp_" + "Z" * 36 + "\n"
        "contact ops@example.org\n"
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig\n"
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\n"
        "ticket ACME-12345\n"
    )
    out = Redact().process(text, None)
    assert out.split("\n") == [
        "OPENAI_API_KEY=[REDACTED:openai_key]",
        "aws [REDACTED:aws_access_key]",
        "token [REDACTED:github_token]",
        "contact [REDACTED:email]",
        "Authorization: [REDACTED:bearer_token]",
        "[REDACTED:private_key]",
        "ticket ACME-12345",
        "",
    ]
    custom = Redact(RedactOptions(builtin=[], patterns={"ticket": r"ACME-\d+"})).process(text, None)
    assert "[REDACTED:ticket]" in custom and "AKIAIOSFODNN7EXAMPLE" in custom
    with pytest.raises(ValueError):
        RedactOptions(builtin=["nope"])
    with pytest.raises(ValueError):
        RedactOptions(patterns={"bad": "("})
