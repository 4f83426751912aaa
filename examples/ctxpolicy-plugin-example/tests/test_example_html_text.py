"""Tests of the html_text preprocessor: behaviour, then the conformance suite."""

from __future__ import annotations

import ctxpolicy_plugin_example
from ctxpolicy_plugin_example import HtmlText

from ctxpolicy import ToolCall
from ctxpolicy.testing import conformance

conformance.ensure_registered(ctxpolicy_plugin_example)

TestHtmlTextConformance = conformance.preprocessor_suite("html_text")
TestHtmlTextNoLimitConformance = conformance.preprocessor_suite(
    "html_text", options={"max_chars": 0, "keep_links": False, "only_if_html": False}
)

PAGE = """<!doctype html>
<html><head><title>t</title><style>body {color: red}</style></head>
<body>
  <h1>Release notes</h1>
  <p>Version <b>2.0</b> is out &amp; stable.</p>
  <script>var tracking = 1;</script>
  <ul><li>Faster</li><li>See <a href="https://example.org/docs">the docs</a></li></ul>
  <pre>line 1
  line 2</pre>
</body></html>"""

CALL = ToolCall(name="fetch_url")


def test_html_to_text() -> None:
    out = HtmlText().process(PAGE, CALL)
    assert out.splitlines()[0] == "# Release notes"
    assert "Version 2.0 is out & stable." in out
    assert "- Faster" in out
    assert "- See the docs (https://example.org/docs)" in out
    assert "tracking" not in out and "color: red" not in out
    assert "line 1\n  line 2" in out


def test_links_can_be_dropped() -> None:
    out = HtmlText(HtmlText.Options(keep_links=False)).process(PAGE, CALL)
    assert "https://example.org" not in out
    assert "- See the docs" in out


def test_plain_text_passes_through() -> None:
    text = "2 < 3 and 5 > 4, nothing to see"
    assert HtmlText().process(text, CALL) == text


def test_max_chars() -> None:
    page = "<p>" + "word " * 5000 + "</p>"
    out = HtmlText(HtmlText.Options(max_chars=100)).process(page, CALL)
    assert out.startswith("word word")
    assert out.endswith("chars of page text truncated]")
    assert len(out) < 200
