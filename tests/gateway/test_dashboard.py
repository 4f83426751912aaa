"""``/dashboard``: real uvicorn, the real openai SDK, the scripted upstream over real HTTP,
and the page itself in a real headless Chromium."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from ctxpolicy.gateway.dashboard import latency
from ctxpolicy.testing.server import ScriptedLLMServer
from tests.integrations.conftest import read_history

from .chromium import Browser, chromium_or_skip
from .conftest import config_for, run_gateway

openai = pytest.importorskip("openai", reason="the 'openai' extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "images" / "dashboard.png"
SECRET_MARKERS = ("key-a", "key-b", "value_3_1", "Fix the failing test", "checked")


def converse(url: str, key: str, agent: str, calls: int, task: str) -> None:
    """One conversation through the openai SDK: ``calls`` calls, the history growing."""
    client = openai.OpenAI(base_url=f"{url}/agents/{agent}/v1", api_key=key, max_retries=0)
    for steps in range(1, calls + 1):
        resp = client.chat.completions.create(model="m", messages=read_history(steps, 14, task))  # type: ignore[arg-type]
        assert resp.choices[0].message.content == "done"


def test_off_unless_enabled(tmp_path: Path, upstream: ScriptedLLMServer) -> None:
    with run_gateway(config_for(tmp_path, upstream)) as gw:
        assert gw.gateway.dashboard is None
        resp = httpx.get(gw.url + "/dashboard/api")
        assert b"conversations" not in resp.content  # forwarded like any unknown path


def test_api_shows_numbers_and_names_only(tmp_path: Path, upstream: ScriptedLLMServer) -> None:
    with run_gateway(config_for(tmp_path, upstream, dashboard=True)) as gw:
        converse(gw.url, "key-a", "test_agent", 24, "Fix the failing test.")
        httpx.get(gw.url + "/v1/models", headers={"authorization": "Bearer key-a"})
        resp = httpx.get(gw.url + "/dashboard/api")
        metrics = httpx.get(gw.url + "/metrics").text
    assert resp.status_code == 200
    assert resp.headers["cache-control"] == "no-store"
    assert "script-src 'self'" in resp.headers["content-security-policy"]
    data = resp.json()
    (conv,) = data["conversations"]
    assert conv["agent"] == "test_agent" and conv["calls"] == 24
    assert sum(conv["compactions"].values()) >= 1 and conv["marks"]
    assert conv["saved"] > 0 and conv["usd_saved"] > 0
    assert data["totals"]["usd_saved"] == conv["usd_saved"]
    assert conv["series"][-1][2] <= conv["window"]  # what was sent fits
    gw_numbers = data["gateway"]
    assert gw_numbers["upstream"]["count"] == 25 and gw_numbers["upstream"]["p50_ms"] > 0
    assert gw_numbers["forwarded"] == [
        {"path": "/v1/models", "reason": "not a model call", "count": 1}
    ]
    assert (
        'ctxpolicy_gateway_forwarded_total{path="/v1/models",reason="not a model call"} 1'
        in metrics
    )
    text = resp.text
    for marker in SECRET_MARKERS:  # no message content, no key
        assert marker not in text


def test_routes(tmp_path: Path, upstream: ScriptedLLMServer) -> None:
    with run_gateway(config_for(tmp_path, upstream, dashboard=True)) as gw:
        page = httpx.get(gw.url + "/dashboard")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert (
            b"dashboard/app.js" in page.content and b"http" not in page.content.split(b"<body")[1]
        )
        js = httpx.get(gw.url + "/dashboard/app.js")
        assert js.headers["content-type"].startswith("text/javascript")
        assert httpx.get(gw.url + "/dashboard/app.css").status_code == 200
        assert httpx.head(gw.url + "/dashboard").status_code == 200
        slash = httpx.get(gw.url + "/dashboard/")
        assert slash.status_code == 308 and slash.headers["location"] == "../dashboard"
        assert httpx.get(gw.url + "/dashboard/../etc/passwd").status_code in (404, 308)
        assert httpx.get(gw.url + "/dashboard/dashboard.js").status_code == 404
        assert httpx.post(gw.url + "/dashboard/api").status_code == 405


def test_api_needs_a_client_token_when_the_gateway_does(
    tmp_path: Path, upstream: ScriptedLLMServer
) -> None:
    config = config_for(tmp_path, upstream, dashboard=True)
    config.client_tokens = ("tok-1", "tok-2")  # type: ignore[attr-defined]
    with run_gateway(config) as gw:
        url = gw.url + "/dashboard/api"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"x-ctxpolicy-token": "tok-3"}).status_code == 401
        assert httpx.get(url, headers={"x-ctxpolicy-token": "tok-2"}).status_code == 200
        assert httpx.get(url, headers={"authorization": "Bearer tok-1"}).status_code == 200
        assert httpx.get(gw.url + "/dashboard").status_code == 200  # the page holds no data


def test_latency_quantiles() -> None:
    bounds = (0.01, 0.1, 1.0)
    assert latency(bounds, [0, 0, 0], 0, 0.0)["p50_ms"] == 0.0
    out = latency(bounds, [5, 10, 10], 10, 0.3)
    assert out["mean_ms"] == 30.0
    assert 0.0 < out["p50_ms"] <= 10.0 < out["p95_ms"] <= 100.0
    assert latency(bounds, [0, 0, 1], 2, 5.0)["p95_ms"] == 1000.0  # above the last bucket


def test_page_in_headless_chromium(tmp_path: Path, upstream: ScriptedLLMServer) -> None:
    """The done-when check: a compacting conversation through the openai SDK, then the
    page in a real Chromium shows it, its compaction and non-zero savings, live, with no
    console error, at 1280x800 and on a phone."""
    exe = chromium_or_skip()
    config = config_for(tmp_path, upstream, dashboard=True)
    config.policies = {  # models the price table lists
        "test_agent": config.policies["test_agent"].model_copy(update={"model_name": "gpt-4o"}),
        "other_agent": config.policies["other_agent"].model_copy(
            update={"model_name": "claude-sonnet-4"}
        ),
    }
    with run_gateway(config) as gw:
        converse(gw.url, "key-a", "test_agent", 26, "Fix the failing test.")
        converse(gw.url, "key-b", "other_agent", 12, "Summarise the build log.")
        httpx.get(gw.url + "/v1/models", headers={"authorization": "Bearer key-a"})
        api = httpx.get(gw.url + "/dashboard/api").json()
        conv = next(c for c in api["conversations"] if c["agent"] == "test_agent")
        layer = next(iter(conv["compactions"]))
        with Browser(exe) as browser:
            browser.open(gw.url + "/dashboard")
            browser.wait_for(
                f"document.getElementById('conversations').textContent.includes({conv['id']!r})"
            )
            # live: a third conversation appears without reloading the page
            converse(gw.url, "key-b", "test_agent", 3, "Add a unit test.")
            browser.wait_for(
                "document.querySelectorAll('#conversations tbody tr').length === 3", timeout=15
            )
            browser.evaluate(
                "Array.from(document.querySelectorAll('#conversations tbody tr'))"
                f".find(r => r.textContent.includes({conv['id']!r})).click()"
            )
            chart = browser.wait_for(
                "document.querySelector('#chart svg') && "
                "document.getElementById('chart').textContent"
            )
            assert layer in chart  # the compaction, marked with its layer
            cards = browser.evaluate("document.getElementById('cards').innerText")
            assert "Compactions" in cards and "Tokens saved" in cards
            saved = browser.evaluate(
                "Array.from(document.querySelectorAll('.card'))"
                ".find(c => c.textContent.includes('Est. cost saved'))"
                ".querySelector('.v').textContent"
            )
            assert saved.startswith("$") and float(saved[1:]) > 0
            assert "/v1/models" in browser.evaluate(
                "document.getElementById('forwarded').innerText"
            )
            overflow = "document.documentElement.scrollWidth - window.innerWidth"
            assert browser.evaluate(overflow) <= 0
            browser.pump(2.5)  # a poll or two more
            if os.environ.get("CTXPOLICY_WRITE_SCREENSHOT"):
                browser.screenshot(SCREENSHOT)
            browser.screenshot(tmp_path / "desktop.png")
            browser.viewport(390, 844, mobile=True)
            browser.pump(0.5)
            assert browser.evaluate(overflow) <= 0  # readable on a phone: no sideways page
            assert browser.evaluate("document.getElementById('chart').clientWidth") <= 390
            browser.screenshot(tmp_path / "phone.png")
            text = browser.evaluate("document.body.innerText")
            for marker in SECRET_MARKERS:
                assert marker not in text
            assert browser.errors == []


def test_event_log_feeds_the_report(tmp_path: Path, upstream: ScriptedLLMServer) -> None:
    """``--events FILE``: every session's events with their agent and model, which
    ``ctxpolicy report`` turns into the same views."""
    from click.testing import CliRunner

    from ctxpolicy.cli import main

    log = tmp_path / "logs" / "events.jsonl"
    config = config_for(tmp_path, upstream, events=str(log))
    with run_gateway(config) as gw:
        assert gw.gateway.dashboard is None  # the log alone, no page
        converse(gw.url, "key-a", "test_agent", 24, "Fix the failing test.")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert events and all(e["agent"] == "test_agent" for e in events)
    assert all("model" in e for e in events)
    assert any(e["type"] == "context.compacted" for e in events)
    for marker in SECRET_MARKERS:
        assert marker not in log.read_text()
    result = CliRunner().invoke(main, ["report", str(log), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (conv,) = data["conversations"]
    assert conv["agent"] == "test_agent" and conv["calls"] == 24 and conv["usd_saved"] > 0


def test_a_poll_without_new_events_reuses_the_last_snapshot(
    tmp_path: Path, upstream: ScriptedLLMServer
) -> None:
    from ctxpolicy.gateway.app import create_app

    dash = create_app(config_for(tmp_path, upstream, dashboard=True)).state.gateway.dashboard
    observe = dash.observer("test_agent")
    observe({"type": "context.status", "conv_id": "c1", "ts": 1.0, "used": 10, "tokens_in": 20})
    first = dash.snapshot()
    again = dash.snapshot()
    assert again["conversations"] is first["conversations"]  # not computed again
    assert dash.snapshot("c1")["conversations"] is not first["conversations"]  # asked for c1
    observe({"type": "context.status", "conv_id": "c1", "ts": 2.0, "used": 12, "tokens_in": 30})
    fresh = dash.snapshot("c1")
    assert fresh["conversations"][0]["calls"] == 2 and fresh["gateway"]["requests"] == 0
