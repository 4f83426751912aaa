"""The registered benchmark suites: what ``python -m benchmarks run SUITE`` runs.

A suite is one or more variants; a variant is one script of this folder run with fixed
arguments in its own process (as it always ran: a fresh interpreter per measurement),
writing one results file pair ``results/<name>.json`` and ``.md``. The page
(docs/benchmarks.md) is built from those files alone (:mod:`benchmarks.report`).

To add a suite: write ``benchmarks/bench_<x>.py`` with ``main(argv) -> int`` that accepts
``--quick`` (a smoke-test size) and ends with ``publish("<name>", data, markdown)``
(:mod:`benchmarks._common`; the markdown opens with a ``## `` heading), then add a
:class:`Suite` here and the results name to :data:`benchmarks.report.ORDER` where its
section belongs on the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SUITES", "Suite", "Variant", "command_for", "suite"]


@dataclass(frozen=True)
class Variant:
    """One script run: ``benchmarks/<script>.py *args``, writing ``results/<results>.*``."""

    name: str
    script: str
    results: str
    args: tuple[str, ...] = ()
    about: str = ""
    quick: bool = True  # accepts --quick
    default: bool = True  # run by ``run SUITE`` without --variant (False: needs arguments)


@dataclass(frozen=True)
class Suite:
    name: str
    about: str
    variants: tuple[Variant, ...] = field(default_factory=tuple)

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"suite {self.name!r} has no variant {name!r}")


def _one(name: str, script: str, about: str, **kw: object) -> Suite:
    """A suite of one variant (the script's results named after it)."""
    return Suite(name, about, (Variant(name, script, script, **kw),))  # type: ignore[arg-type]


_PEERS = (
    "--peers-only",
    "--peer-policies",
    "agents.yaml:coding_agent,agents.yaml:coding_agent_16k",
    "--results-name",
    "bench_peers_ruler",
)

SUITES: tuple[Suite, ...] = (
    Suite(
        "percall",
        "what one model call costs (prepare + add_tool_result), from every angle",
        (
            Variant(
                "engine",
                "bench_engine",
                "bench_engine",
                about="vs one tiktoken pass, "
                "a naive recount, LangChain and the other peers; memory growth",
            ),
            Variant(
                "floors",
                "bench_floors",
                "bench_floors",
                about="the floors under it: durability and state saves off",
            ),
            Variant(
                "calls",
                "bench_prepare_calls",
                "bench_prepare_calls",
                about="calls that do not compact, baseline tree vs this one",
            ),
            Variant(
                "profile",
                "bench_call_profile",
                "bench_call_profile",
                quick=False,
                about="Python calls per plain prepare, first vs last quarter",
            ),
            Variant(
                "scaling",
                "bench_scaling",
                "bench_scaling",
                about="one prepare of 1k to 100k tiny messages",
            ),
            Variant(
                "state",
                "bench_state",
                "bench_state",
                about="state saved after every call: memory, sqlite, postgres",
            ),
            Variant(
                "otel", "bench_otel", "bench_otel", about="event sinks: JSONL and OpenTelemetry"
            ),
            Variant(
                "dashboard",
                "bench_dashboard",
                "bench_dashboard",
                about="the dashboard's observer folding each call's events",
            ),
        ),
    ),
    Suite(
        "quality",
        "compaction quality on the shared traces: baselines and LangChain-family peers",
        (
            Variant(
                "matrix",
                "bench_quality",
                "bench_quality",
                about="every trace × shipped policy × window against the baselines",
            ),
            Variant(
                "peers",
                "bench_quality",
                "bench_peers_ruler",
                _PEERS,
                about="the peers by the ruler users pay (the page's summary)",
            ),
        ),
    ),
    _one("economics", "bench_economics", "compactions and prefix changes per 100 calls"),
    _one(
        "sweep", "bench_peers_ruler_sweep", "the shipped coding policies against one-knob changes"
    ),
    _one("incidents", "bench_incidents", "three incident scenarios: fixed triggers vs ours"),
    _one("cache", "bench_cache", "prompt-cache-aware compaction"),
    _one("validate", "bench_validate", "the policy validator against check-jsonschema"),
    Suite(
        "tokens",
        "token counting: backends, exactness",
        (
            Variant(
                "count",
                "bench_tokens",
                "bench_tokens",
                quick=False,
                about="every backend on our texts and the traces",
            ),
            Variant(
                "verify",
                "bench_tokens",
                "bench_tokens_verify",
                ("--verify",),
                quick=False,
                about="quicktok against the reference vocabularies",
            ),
        ),
    ),
    Suite(
        "tune",
        "ctxpolicy tune: the study and its speed",
        (
            Variant("study", "bench_tune", "bench_tune", about="tuned vs shipped, held-out half"),
            Variant(
                "speed",
                "bench_tune",
                "bench_tune_speed",
                default=False,
                about="study time against a baseline tree (needs --baseline DIR)",
            ),
        ),
    ),
    _one("facts", "bench_facts", "fact extraction"),
    _one("store", "bench_store", "snapshot store and history archive"),
    _one("preprocessors", "bench_preprocessors", "the built-in preprocessors on every tool result"),
    _one("simulate", "bench_simulate", "`ctxpolicy simulate --plot` on three shared traces"),
    _one("gateway", "bench_gateway", "the gateway's overhead per non-compacting call"),
    _one(
        "frontdoor", "bench_frontdoor_blocking", "does one long history block another conversation"
    ),
    Suite(
        "kinds",
        "every kind of agent (coding, data, SWE, support), baseline tree vs this one",
        (
            Variant("held-out", "bench_kinds", "bench_kinds", about="the held-out half"),
            Variant(
                "tune",
                "bench_kinds",
                "bench_kinds_tune",
                ("--half", "tune"),
                about="the half the policies were tuned on",
            ),
        ),
    ),
    _one("taskstate", "bench_taskstate", "task state after compaction, every agent kind"),
)


def suite(name: str) -> Suite:
    for s in SUITES:
        if s.name == name:
            return s
    raise KeyError(name)


def command_for(results: str) -> str | None:
    """The runner command that writes ``results/<results>.*`` (None: no suite does)."""
    for s in SUITES:
        for v in s.variants:
            if v.results == results:
                one = len(s.variants) == 1
                return f"python -m benchmarks run {s.name}" + (
                    "" if one else f" --variant {v.name}"
                )
    return None
