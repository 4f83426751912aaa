"""``/dashboard``: the live page of ``ctxpolicy serve --dashboard`` (docs/observability.md).

The page (package data, :mod:`ctxpolicy.observe.page`) polls ``/dashboard/api``: the
views of every session's events (:class:`ctxpolicy.observe.views.Views`, fed as the
sessions' ``on_event``) and the gateway's own numbers (upstream latency, overflow
retries, requests forwarded without preparing) read from its metrics. The page itself
holds no data; the data needs the credential every other request of the gateway
needs: when the gateway requires client tokens, one of them, in ``X-Ctxpolicy-Token``
or as ``Authorization: Bearer``. Only numbers and names leave: no message content,
no key.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from ctxpolicy.calls import off_loop
from ctxpolicy.observe.page import ASSETS, asset
from ctxpolicy.observe.views import Views

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.gateway.config import GatewayConfig
    from ctxpolicy.gateway.metrics import Metrics


class Gateway(Protocol):
    """What the dashboard reads of the gateway's app (its config and metrics)."""

    config: GatewayConfig
    metrics: Metrics


__all__ = ["PREFIX", "Dashboard", "latency", "observers"]

PREFIX = "/dashboard"
#: Conversations whose series the API sends (the most recent, and the one asked for).
SERIES = 25
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def observers(gateway: Gateway) -> Callable[[str], Callable[[dict[str, Any]], None]] | None:
    """The ``on_event`` of an agent's sessions: the dashboard's views (``--dashboard``)
    and the event log (``--events FILE``: each event as
    :class:`~ctxpolicy.events.sinks.JsonlEventSink` writes it, with its ``agent`` and the
    agent's ``model``); None without either."""
    dashboard: Dashboard | None = getattr(gateway, "dashboard", None)
    path = getattr(gateway.config, "events", None)
    log = None
    if path:
        from ctxpolicy.events.sinks import JsonlEventSink

        log = JsonlEventSink(path)
    if dashboard is None and log is None:
        return None
    models = _models(gateway.config.policies)

    def for_agent(agent: str) -> Callable[[dict[str, Any]], None]:
        views = dashboard.observer(agent) if dashboard is not None else None
        model = models.get(agent)
        if log is None:
            assert views is not None
            return views

        def observe(event: dict[str, Any]) -> None:
            if views is not None:
                views(event)
            log({**event, "agent": agent, "model": model})

        return observe

    return for_agent


def latency(
    bounds: tuple[float, ...], counts: list[int], total: int, seconds: float
) -> dict[str, Any]:
    """``{count, mean_ms, p50_ms, p95_ms}`` from a cumulative latency histogram (each
    quantile interpolated inside its bucket)."""
    out: dict[str, Any] = {"count": total, "mean_ms": 0.0, "p50_ms": 0.0, "p95_ms": 0.0}
    if not total:
        return out
    out["mean_ms"] = round(1000 * seconds / total, 3)
    for key, q in (("p50_ms", 0.5), ("p95_ms", 0.95)):
        rank = q * total
        lo, below = 0.0, 0
        value = bounds[-1] if bounds else 0.0
        for bound, cum in zip(bounds, counts, strict=False):
            if cum >= rank:
                inside = cum - below
                value = lo + (bound - lo) * ((rank - below) / inside if inside else 1.0)
                break
            lo, below = bound, cum
        out[key] = round(1000 * value, 3)
    return out


def _models(policies: Mapping[str, Any]) -> dict[str, str | None]:
    """Agent → the model name its prices are looked up by."""
    return {a: p.model_name or p.model.name for a, p in policies.items()}


class Dashboard:
    """The dashboard of one gateway worker: its views and its routes."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.views = Views(models=_models(gateway.config.policies))
        # the last snapshot, reused while no event arrived (every open page polls)
        self._cache: tuple[int, str | None, dict[str, Any]] | None = None

    def observer(self, agent: str) -> Callable[[Mapping[str, Any]], None]:
        """The ``on_event`` of ``agent``'s sessions."""
        return self.views.observer(agent)

    def allowed(self, request: Request) -> bool:
        """The request carries the credential the gateway asks of its clients."""
        tokens = getattr(self.gateway.config, "client_tokens", ()) or ()
        if not tokens:
            return True
        given = request.headers.get("x-ctxpolicy-token") or ""
        auth = request.headers.get("authorization") or ""
        if not given and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if not given:
            return False
        data = given.encode("utf-8", "surrogatepass")
        return any(hmac.compare_digest(data, t.encode("utf-8", "surrogatepass")) for t in tokens)

    async def route(self, request: Request) -> Response:
        """Answer a request under ``/dashboard``."""
        if request.method not in ("GET", "HEAD"):
            return PlainTextResponse("method not allowed", status_code=405, headers=_HEADERS)
        sub = request.url.path[len(PREFIX) :]
        if sub == "/":
            return RedirectResponse("../dashboard", status_code=308)
        if sub == "/api":
            if not self.allowed(request):
                return JSONResponse(
                    {"error": "a gateway client token is needed (X-Ctxpolicy-Token)"},
                    status_code=401,
                    headers=_HEADERS,
                )
            conv = request.query_params.get("conv")
            data = await off_loop(self.snapshot, conv)
            return JSONResponse(data, headers=_HEADERS)
        name = sub[1:] if sub.startswith("/") else sub
        found = ASSETS.get(name)
        if found is None:
            return PlainTextResponse("not found", status_code=404, headers=_HEADERS)
        file, media = found
        return Response(asset(file), media_type=media, headers=_HEADERS)

    def snapshot(self, conv: str | None = None) -> dict[str, Any]:
        """The views and the gateway's own numbers (runs in a worker thread)."""
        events = self.views.events
        cached = self._cache
        if cached is not None and cached[0] == events and cached[1] == conv:
            data = dict(cached[2])
        else:
            data = self.views.snapshot(source="gateway", series=SERIES, series_of=conv)
            self._cache = (events, conv, data)
            data = dict(data)
        data["gateway"] = self.gateway_numbers()
        return data

    def gateway_numbers(self) -> dict[str, Any]:
        m = self.gateway.metrics
        from ctxpolicy.gateway import metrics as metrics_mod

        with m._lock:
            lat = latency(metrics_mod._BUCKETS, list(m._lat_buckets), m._lat_count, m._lat_sum)
            forwarded = [
                {**dict(labels), "count": n}
                for labels, n in sorted(getattr(m, "forwarded", {}).items())
            ]
            retries = sum(m.overflow_retries.values())
            recall = sum(m.recall_rounds.values())
            requests = sum(m.requests.values())
        return {
            "upstream": lat,
            "forwarded": forwarded,
            "retries": retries,
            "recall": recall,
            "requests": requests,
        }
