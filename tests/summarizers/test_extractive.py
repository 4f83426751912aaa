from ctxpolicy.components import SummaryRequest
from ctxpolicy.summarizers.extractive import Digest, ExtractiveOptions, ExtractiveSummarizer
from tests.helpers_conv import Conv, approx_text, ref_line


def msgs():
    return (
        Conv()
        .user("Fix the login bug in src/auth/login.py for ticket AUTH-142")
        .step(
            (
                "read_file",
                {"path": "src/auth/login.py"},
                "def login():\n    pool = connect(max_connections=10)\n"
                + ref_line("c", 1, "read_file"),
            ),
            text="Reading the file first",
        )
        .step(
            (
                "run_tests",
                {"path": "tests/test_login.py"},
                "FAILED tests/test_login.py::test_ok - AssertionError: 401 != 200\n1 failed in 2.5s",
            )
        )
        .assistant("The pool is too small; next: raise max_connections to 50")
        .messages
    )


def test_exact_digest():
    req = SummaryRequest(
        messages=msgs(),
        previous_summary=None,
        max_tokens=1000,
        instructions="",
        constraints=("Never push to main",),
        count_text=approx_text,
    )
    out = ExtractiveSummarizer().summarize(req)
    assert out == "\n".join(
        [
            "[Summary of earlier conversation (extractive digest)]",
            "Goal: Fix the login bug in src/auth/login.py for ticket AUTH-142",
            "Constraints:",
            "- Never push to main",
            "Files:",
            "- src/auth/login.py",
            "- tests/test_login.py",
            "Identifiers:",
            "- AUTH-142",
            "- pool=connect",
            "- max_connections=10",
            "- 2.5s",
            "Commands:",
            "- read_file(path=src/auth/login.py) → def login(): [ctxsnap://c/step_001_read_file]",
            "- run_tests(path=tests/test_login.py) → FAILED tests/test_login.py::test_ok - AssertionError: 401 != 200",
            "Errors:",
            "- FAILED tests/test_login.py::test_ok - AssertionError: 401 != 200",
            "- 1 failed in 2.5s",
            "Decisions:",
            "- Reading the file first",
            "- The pool is too small; next: raise max_connections to 50",
        ]
    )
    # deterministic
    assert ExtractiveSummarizer().summarize(req) == out


def test_merges_previous_digest_and_bounds():
    first = ExtractiveSummarizer().summarize(
        SummaryRequest(
            messages=msgs(),
            previous_summary=None,
            max_tokens=1000,
            instructions="",
            constraints=("Never push to main",),
        )
    )
    more = Conv().step(("bash", {"cmd": "git diff"}, "diff --git a/src/auth/pool.py")).messages
    merged = ExtractiveSummarizer().summarize(
        SummaryRequest(
            messages=more,
            previous_summary=first,
            max_tokens=1000,
            instructions="",
            constraints=("Never push to main",),
        )
    )
    d = Digest.parse(merged)
    assert d is not None
    assert d.goal.startswith("Fix the login bug")
    assert d.sections["Constraints"] == ["Never push to main"]
    assert d.sections["Commands"][-1] == "bash(cmd=git diff) → diff --git a/src/auth/pool.py"
    assert merged.count("[Summary of earlier") == 1
    small = ExtractiveSummarizer().summarize(
        SummaryRequest(
            messages=msgs(),
            previous_summary=merged,
            max_tokens=60,
            instructions="",
            constraints=("Never push to main",),
            count_text=approx_text,
        )
    )
    assert approx_text(small) <= 60
    assert "Never push to main" in small


def test_options_cap_items():
    s = ExtractiveSummarizer(ExtractiveOptions(max_items=1))
    out = s.summarize(
        SummaryRequest(messages=msgs(), previous_summary=None, max_tokens=1000, instructions="")
    )
    d = Digest.parse(out)
    assert d.sections["Commands"] == [
        "run_tests(path=tests/test_login.py) → FAILED tests/test_login.py::test_ok - AssertionError: 401 != 200"
    ]
