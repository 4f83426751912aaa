"""The registered benchmark suites: what ``python -m benchmarks run SUITE`` runs.

A suite is one or more variants; a variant is one script of this folder run with fixed
arguments in its own process, writing ``results/<name>.json`` and ``.md``
(benchmarks/README.md says how to add one).
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


def _v(name: str, script: str, about: str, results: str = "", *args: str, **kw: bool) -> Variant:
    return Variant(name, script, results or script, args, about, **kw)


def _one(name: str, script: str, about: str, **kw: bool) -> Suite:
    """A suite of one variant (the script's results named after it)."""
    return Suite(name, about, (Variant(name, script, script, (), about, **kw),))


_PEERS = "--peers-only", "--peer-policies", "agents.yaml:coding_agent,agents.yaml:coding_agent_16k"

# fmt: off
SUITES: tuple[Suite, ...] = (
    Suite("percall", "what one model call costs (prepare + add_tool_result), from every angle", (
        _v("engine", "bench_engine", "vs one tiktoken pass, a naive recount and the peers; memory"),
        _v("floors", "bench_durability", "the floors under it: durability and state saves off",
           "bench_floors"),
        _v("calls", "bench_calls", "calls that do not compact, baseline tree vs this one",
           "bench_prepare_calls"),
        _v("profile", "bench_calls", "Python calls per plain prepare, first vs last quarter",
           "bench_call_profile", "--profile"),
        _v("scaling", "bench_scaling", "one prepare of 1k to 100k tiny messages"),
        _v("state", "bench_durability", "state saved after every call: memory, sqlite, postgres",
           "bench_state", "--state"),
        _v("otel", "bench_observe", "event sinks: JSONL and OpenTelemetry", "bench_otel"),
        _v("dashboard", "bench_observe", "the dashboard's observer folding each call's events",
           "bench_dashboard", "--dashboard"),
    )),
    Suite("quality", "compaction quality on the shared traces: baselines and peers", (
        _v("matrix", "bench_quality", "every trace × shipped policy × window vs the baselines"),
        _v("peers", "bench_quality", "the peers by the ruler users pay (the page's summary)",
           "bench_peers_ruler", *_PEERS, "--results-name", "bench_peers_ruler"),
    )),
    _one("economics", "bench_economics", "compactions and prefix changes per 100 calls"),
    _one("sweep", "bench_peers_ruler_sweep", "the shipped coding policies vs one-knob changes"),
    _one("incidents", "bench_incidents", "three incident scenarios: fixed triggers vs ours"),
    _one("cache", "bench_cache", "prompt-cache-aware compaction"),
    _one("validate", "bench_validate", "the policy validator against check-jsonschema"),
    Suite("tokens", "token counting: backends, exactness", (
        _v("count", "bench_tokens", "every backend on our texts and the traces", quick=False),
        _v("verify", "bench_tokens", "quicktok against the reference vocabularies",
           "bench_tokens_verify", "--verify", quick=False),
    )),
    Suite("tune", "ctxpolicy tune: the study and its speed", (
        _v("study", "bench_tune", "tuned vs shipped, held-out half"),
        _v("speed", "bench_tune", "study time against a baseline tree (needs --baseline DIR)",
           "bench_tune_speed", default=False),
    )),
    _one("facts", "bench_facts", "fact extraction"),
    _one("store", "bench_store", "snapshot store and history archive"),
    _one("preprocessors", "bench_preprocessors", "the built-in preprocessors on every tool result"),
    _one("simulate", "bench_simulate", "`ctxpolicy simulate --plot` on three shared traces"),
    _one("gateway", "bench_gateway", "the gateway's overhead per non-compacting call"),
    _one("frontdoor", "bench_frontdoor_blocking", "does one long history block another one"),
    Suite("kinds", "every kind of agent (coding, data, SWE, support), baseline vs this tree", (
        _v("held-out", "bench_kinds", "the held-out half"),
        _v("tune", "bench_kinds", "the half the policies were tuned on", "bench_kinds_tune",
           "--half", "tune"),
    )),
    _one("taskstate", "bench_taskstate", "task state after compaction, every agent kind"),
)
# fmt: on


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
