from ctxpolicy.facts import Facts, error_lines, extract, lost_facts
from tests.helpers_conv import Conv

TEXT = """Read src/app/config.py and /etc/nginx/nginx.conf; docs at https://example.com/a/b?x=1.
Booking ABC123, ticket JIRA-4521, commit 3f2a9c1d, id 123e4567-e89b-12d3-a456-426614174000.
Took 250 ms with 16GB RAM over 3 files. ValueError: bad; ConnectionTimeout.
Use `parse_config` and max_connections=10. See README.md.
Traceback (most recent call last):
E   AssertionError: 1 != 2"""


def test_extract_exact():
    assert extract(TEXT) == Facts(
        paths=["src/app/config.py", "/etc/nginx/nginx.conf", "README.md"],
        urls=["https://example.com/a/b?x=1"],
        ids=["123e4567-e89b-12d3-a456-426614174000", "3f2a9c1d", "ABC123", "JIRA-4521"],
        numbers=["250 ms", "16GB", "3 files"],
        errors=["ValueError", "ConnectionTimeout", "AssertionError"],
        symbols=["parse_config"],
        settings=["max_connections=10"],
    )
    assert extract(TEXT) == extract(TEXT)
    assert extract("") == Facts() and not Facts()


def test_no_false_ids():
    f = extract("the year 2024 and version 1.2.3 with deadbeef words like HTTP and GPT")
    assert f.ids == []
    assert extract("订单号 ORD2024001 已取消，用户 张三").ids == ["ORD2024001"]


def test_error_lines():
    assert error_lines(TEXT) == [
        "Took 250 ms with 16GB RAM over 3 files. ValueError: bad; ConnectionTimeout.",
        "Traceback (most recent call last):",
        "E   AssertionError: 1 != 2",
    ]
    assert error_lines("ok\nFAILED a\nFAILED b\nFAILED c", limit=2) == ["FAILED b", "FAILED c"]


def test_lost_facts():
    before = (
        Conv()
        .user("fix ABC123 in src/a.py")
        .step(("read_file", {"path": "src/b.py"}, "KeyError"))
        .units()
    )
    after = before[:1]
    assert lost_facts(before, after, None) == ["src/b.py", "KeyError"]
    assert lost_facts(before, after, "ledger: src/b.py KeyError") == []
    assert lost_facts(before, before, None) == []
