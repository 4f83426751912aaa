"""The dashboard's static page: package data, no third party, data embedded safely."""

from __future__ import annotations

import json
import re

from ctxpolicy.observe.page import ASSETS, asset, report_html
from ctxpolicy.observe.views import Views


def test_assets_are_package_data_and_fetch_nothing_elsewhere() -> None:
    for file, media in ASSETS.values():
        body = asset(file).decode("utf-8")
        assert body and media
        # no CDN, no font service, no analytics: every URL is relative to the page
        assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", body), file
        assert "@import" not in body and "url(http" not in body
    html = asset("dashboard.html").decode()
    assert 'name="viewport"' in html  # readable on a phone


def test_the_script_puts_data_in_through_text_only() -> None:
    js = asset("dashboard.js").decode()
    assert "innerHTML" not in js and "outerHTML" not in js and "insertAdjacentHTML" not in js
    assert "eval(" not in js and "new Function" not in js
    assert 'setAttribute("style"' not in js and "style:" not in js  # CSP: no inline style


def test_report_embeds_data_that_cannot_close_its_script() -> None:
    views = Views()
    hostile = "</script><script>alert(1)</script><!--"
    views.add(
        {
            "type": "context.status",
            "conv_id": hostile,
            "ts": 1.0,
            "used": 5,
            "tokens_in": 9,
            "compact_layer": "</SCRIPT>",
        }
    )
    data = views.snapshot(source="x.jsonl")
    html = report_html(data)
    assert "<script>alert(1)" not in html and "</SCRIPT>" not in html
    start = html.index('<script type="application/json" id="embedded">') + len(
        '<script type="application/json" id="embedded">'
    )
    embedded = html[start : html.index("</script>", start)]
    assert json.loads(embedded)["conversations"][0]["id"] == hostile
    assert "dashboard/app.js" not in html and "dashboard/app.css" not in html  # inline
    assert html.count("<script") == 2
