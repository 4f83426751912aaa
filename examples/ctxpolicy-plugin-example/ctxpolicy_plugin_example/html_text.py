"""``html_text`` — turn an HTML tool result (a fetched web page) into readable text.

Uses only the standard library's :class:`html.parser.HTMLParser`: scripts,
styles and other invisible elements are removed, block elements become line
breaks, list items get a ``- `` bullet, headings a ``#``, and links keep their
target as ``text (url)`` when ``keep_links`` is on. Text that does not look like
HTML passes through unchanged. Output longer than ``max_chars`` is cut, with a
marker saying how much was removed.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from pydantic import Field

from ctxpolicy import ComponentOptions, Preprocessor, ToolCall

LOOKS_LIKE_HTML = re.compile(
    r"<(!doctype|html|head|body|div|p|a|span|table|ul|ol|li|h[1-6]|br|section|article|main)\b",
    re.IGNORECASE,
)
HIDDEN = {"script", "style", "head", "noscript", "template", "svg", "iframe", "object"}
BLOCK = {
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "nav",
    "aside",
    "table",
    "tr",
    "ul",
    "ol",
    "li",
    "dl",
    "dt",
    "dd",
    "pre",
    "blockquote",
    "form",
    "figure",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "br",
    "hr",
}
TRUNCATED = "\n[… {n} chars of page text truncated]"


class HtmlTextOptions(ComponentOptions):
    """Options of ``html_text``."""

    max_chars: int = Field(default=4000, ge=0, description="Longest text kept (0: no limit).")
    keep_links: bool = Field(default=True, description="Write links as `text (url)`.")
    only_if_html: bool = Field(
        default=True, description="Leave results that do not look like HTML unchanged."
    )


class _TextParser(HTMLParser):
    def __init__(self, keep_links: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.keep_links = keep_links
        self.parts: list[tuple[str, bool]] = []  # (text, inside <pre>)
        self.hidden = 0
        self.pre = 0
        self.href: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in HIDDEN:
            self.hidden += 1
            return
        if tag in BLOCK:
            self.out("\n")
        if tag == "pre":
            self.pre += 1
        elif tag == "li":
            self.out("- ")
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.out("#" * int(tag[1]) + " ")
        elif tag == "a":
            self.href.append(dict(attrs).get("href"))
        elif tag in ("td", "th"):
            self.out(" | ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in BLOCK:
            self.out("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in HIDDEN:
            self.hidden = max(0, self.hidden - 1)
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag == "a" and self.href:
            href = self.href.pop()
            if (
                self.keep_links
                and href
                and not href.startswith(("#", "javascript:"))
                and not self.hidden
            ):
                self.out(f" ({href})")
        if tag in BLOCK:
            self.out("\n")

    def handle_data(self, data: str) -> None:
        if self.hidden:
            return
        if self.pre:
            self.parts.append((data, True))
        else:
            self.out(re.sub(r"\s+", " ", data))

    def out(self, text: str) -> None:
        self.parts.append((text, False))

    def text(self) -> str:
        lines, verbatim = [""], [False]
        for segment, pre in self.parts:
            for k, piece in enumerate(segment.split("\n")):
                if k:
                    lines.append("")
                    verbatim.append(False)
                lines[-1] += piece
                verbatim[-1] = verbatim[-1] or (pre and bool(piece))
        out: list[str] = []
        for line, pre in zip(lines, verbatim, strict=True):
            line = line.rstrip() if pre else line.strip()
            if line or (out and out[-1]):
                out.append(line)
        return "\n".join(out).strip()


class HtmlText(Preprocessor):
    name = "html_text"
    description = "HTML tool results (web pages) to readable text, links kept."
    Options = HtmlTextOptions
    options: HtmlTextOptions

    def to_text(self, html: str) -> str:
        parser = _TextParser(self.options.keep_links)
        try:
            parser.feed(html)
            parser.close()
        except Exception:  # HTMLParser is lenient; be safe on odd input anyway
            return html
        return parser.text()

    def process(self, text: str, call: ToolCall) -> str:
        out = text
        if not self.options.only_if_html or LOOKS_LIKE_HTML.search(text):
            converted = self.to_text(text)
            if len(converted) <= len(text):  # never make a result longer
                out = converted
        limit = self.options.max_chars
        if limit and len(out) > limit:
            out = out[:limit] + TRUNCATED.format(n=len(out) - limit)
        return out
