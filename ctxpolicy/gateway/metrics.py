"""Prometheus text metrics of the gateway (no dependency: a few counters and a histogram)."""

from __future__ import annotations

import threading
from collections import defaultdict

__all__ = ["Metrics"]

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    inner = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in labels
    )
    return "{" + inner + "}"


class Metrics:
    """Counters of requests, compactions, tokens saved, retries; upstream latency."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[tuple[str, str], ...], int] = defaultdict(int)
        self.compactions: dict[tuple[tuple[str, str], ...], int] = defaultdict(int)
        self.tokens_saved: dict[tuple[tuple[str, str], ...], int] = defaultdict(int)
        self.overflow_retries: dict[tuple[tuple[str, str], ...], int] = defaultdict(int)
        self.recall_rounds: dict[tuple[tuple[str, str], ...], int] = defaultdict(int)
        self.forwarded: dict[tuple[tuple[str, str], ...], int] = defaultdict(int)
        self._lat_buckets = [0] * len(_BUCKETS)
        self._lat_count = 0
        self._lat_sum = 0.0

    def request(self, api: str, agent: str, status: int) -> None:
        with self._lock:
            self.requests[(("api", api), ("agent", agent), ("status", str(status)))] += 1

    def prepared(self, agent: str, compactions: int, saved: int) -> None:
        with self._lock:
            if compactions:
                self.compactions[(("agent", agent),)] += compactions
            if saved > 0:
                self.tokens_saved[(("agent", agent),)] += saved

    def retry(self, agent: str) -> None:
        with self._lock:
            self.overflow_retries[(("agent", agent),)] += 1

    def recall(self, agent: str) -> None:
        with self._lock:
            self.recall_rounds[(("agent", agent),)] += 1

    def forward(self, path: str, reason: str) -> None:
        """A request forwarded without preparing it (gateway/unprepared.py)."""
        with self._lock:
            self.forwarded[(("path", path), ("reason", reason))] += 1

    def upstream(self, seconds: float) -> None:
        with self._lock:
            self._lat_count += 1
            self._lat_sum += seconds
            for i, b in enumerate(_BUCKETS):
                if seconds <= b:
                    self._lat_buckets[i] += 1

    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        out: list[str] = []
        with self._lock:
            for name, help_, data in (
                ("ctxpolicy_gateway_requests_total", "Requests handled.", self.requests),
                ("ctxpolicy_gateway_compactions_total", "Compactions run.", self.compactions),
                (
                    "ctxpolicy_gateway_tokens_saved_total",
                    "Prompt tokens removed before forwarding.",
                    self.tokens_saved,
                ),
                (
                    "ctxpolicy_gateway_overflow_retries_total",
                    "Upstream context overflows retried.",
                    self.overflow_retries,
                ),
                (
                    "ctxpolicy_gateway_recall_rounds_total",
                    "Recall-only tool calls answered inside the gateway.",
                    self.recall_rounds,
                ),
                (
                    "ctxpolicy_gateway_forwarded_total",
                    "Requests forwarded without preparing them, by path and reason.",
                    self.forwarded,
                ),
            ):
                out.append(f"# HELP {name} {help_}")
                out.append(f"# TYPE {name} counter")
                for labels, value in sorted(data.items()):
                    out.append(f"{name}{_labels(labels)} {value}")
            name = "ctxpolicy_gateway_upstream_seconds"
            out.append(f"# HELP {name} Upstream latency (to response headers).")
            out.append(f"# TYPE {name} histogram")
            for b, n in zip(_BUCKETS, self._lat_buckets, strict=True):
                out.append(f'{name}_bucket{{le="{b}"}} {n}')
            out.append(f'{name}_bucket{{le="+Inf"}} {self._lat_count}')
            out.append(f"{name}_sum {self._lat_sum:.6f}")
            out.append(f"{name}_count {self._lat_count}")
        return "\n".join(out) + "\n"
