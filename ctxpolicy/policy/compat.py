"""Readers for the two source designs' configuration files, read unchanged.

* ``dbgpt`` (design A): a TOML application file with ``[service.web.agent_context]``
  and ``[[models.llms]]``. One agent ``default`` (the first llm as its model), plus
  one agent per further llm, named after it (characters outside ``[A-Za-z0-9_.-]``
  become ``_``), extending ``default`` with that model. The window is the smaller of
  ``max_context_tokens`` and the llm's ``context_length``. Pipeline: L1
  ``observation_mask``, L2 ``drop_rounds`` at warning, L3 ``summarize`` at error,
  ``emergency`` on overflow keeping 2 rounds. Other llm keys (``api_key``,
  ``provider``...) are not policy and are ignored, never interpolated.
* ``compression_config`` (design B): a YAML file whose top-level keys are agent
  types, each a ``CompressionConfig`` merged over ``default``, with the
  dataclass's defaults below that. Pipeline: ``observation_mask`` (L1 prune) at
  warning, ``summarize`` (L2, unless ``enable_summary: false``) at error,
  ``offload`` (L3) at critical; ``compression_levels`` l1/l2/l3 set the warning,
  error and critical thresholds. ``tool_preprocess`` maps to tool rules.

:func:`convert` also returns, for each native path, the path in the source file it
came from (so diagnostics point at the user's line), and warnings for keys it does
not understand (never silently dropped).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from ctxpolicy.policy.source import PathT

__all__ = ["CompatFormat", "convert", "detect_format", "to_native"]

CompatFormat = Literal["native", "dbgpt", "compression_config"]
Origins = dict[PathT, PathT]
Warnings = list[tuple[PathT, str]]

# design A defaults (DB-GPT documentation)
DBGPT_DEFAULTS: dict[str, Any] = {
    "max_context_tokens": 120000,
    "reserved_tokens": 4096,
    "warning_threshold": 0.70,
    "error_threshold": 0.90,
    "critical_threshold": 0.95,
    "min_keep_recent_rounds": 3,
    "max_observation_age_rounds": 5,
    "truncated_observation_max_chars": 200,
    "min_keep_tokens": 10000,
    "max_compact_failures": 3,
}
DBGPT_LLM_KEYS = {"name", "provider", "api_key", "api_base", "context_length", "model", "backend"}

# design B CompressionConfig defaults (the article's dataclass)
COMPRESSION_DEFAULTS: dict[str, Any] = {
    "total_window_tokens": 32000,
    "output_reserve_tokens": 4000,
    "expected_tool_growth_tokens": 2000,
    "safety_margin_tokens": 2000,
    "target_tokens_after_compression": 14000,
    "keep_recent_turns": 3,
    "model_name": "gpt-4o",
    "preserve_constraints": True,
}
COMPRESSION_EXTRA_KEYS = {"compression_levels", "enable_summary", "tool_preprocess"}
COMPRESSION_KEYS = set(COMPRESSION_DEFAULTS) | COMPRESSION_EXTRA_KEYS
B_L1_MAX_CHARS = 2000  # design B L1: results over 2000 chars truncated head/tail
B_DEFAULT_CHARS = 3000  # design B: default head/tail at 3000 chars

_AGENT_NAME_BAD = re.compile(r"[^A-Za-z0-9_.\-]")


def detect_format(data: Any) -> CompatFormat:
    """Which reader a parsed document needs."""
    if not isinstance(data, dict) or "ctxpolicy" in data or "policies" in data:
        return "native"
    service = data.get("service")
    if isinstance(service, dict):
        web = service.get("web")
        if isinstance(web, dict) and "agent_context" in web:
            return "dbgpt"
    models = data.get("models")
    if isinstance(models, dict) and isinstance(models.get("llms"), list) and len(data) <= 2:
        return "dbgpt"
    sections = [v for v in data.values() if isinstance(v, dict)]
    if data and len(sections) == len(data) and any(COMPRESSION_KEYS & set(v) for v in sections):
        return "compression_config"
    return "native"


def to_native(data: dict[str, Any], fmt: CompatFormat | None = None) -> dict[str, Any]:
    """A native policy-file mapping equivalent to ``data`` (``fmt`` autodetected)."""
    return convert(data, fmt)[0]


def convert(
    data: dict[str, Any], fmt: CompatFormat | None = None
) -> tuple[dict[str, Any], Origins, Warnings]:
    """``(native, origins, warnings)``: see the module docstring."""
    fmt = fmt or detect_format(data)
    if fmt == "dbgpt":
        return _from_dbgpt(data)
    if fmt == "compression_config":
        return _from_compression(data)
    return data, {}, []


# --------------------------------------------------------------------------- design A


def _from_dbgpt(data: dict[str, Any]) -> tuple[dict[str, Any], Origins, Warnings]:
    origins: Origins = {}
    warnings: Warnings = []
    src: PathT = ("service", "web", "agent_context")
    service = data.get("service") if isinstance(data.get("service"), dict) else {}
    web = (
        service.get("web")
        if isinstance(service, dict) and isinstance(service.get("web"), dict)
        else {}
    )
    ac_raw = web.get("agent_context") if isinstance(web, dict) else None
    ac: dict[str, Any] = dict(ac_raw) if isinstance(ac_raw, dict) else {}
    for key in ac:
        if key not in DBGPT_DEFAULTS:
            warnings.append(
                ((*src, key), f"DB-GPT agent_context setting {key!r} is not understood; ignored")
            )
    cfg = {**DBGPT_DEFAULTS, **{k: v for k, v in ac.items() if k in DBGPT_DEFAULTS}}

    def o(native: PathT, key: str) -> None:
        origins[native] = (*src, key) if key in ac else src

    models_raw = data.get("models")
    llms = models_raw.get("llms") if isinstance(models_raw, dict) else None
    llms = [x for x in llms if isinstance(x, dict)] if isinstance(llms, list) else []

    base: PathT = ("policies", "default")
    catalogue: dict[str, Any] = {}
    agents: dict[str, Any] = {}
    origins[("policies",)] = src
    origins[base] = src
    first_model: str | None = None
    for i, llm in enumerate(llms):
        name = str(llm.get("name") or f"llm{i}")
        spec: dict[str, Any] = {"name": name}
        lsrc: PathT = ("models", "llms", i)
        origins[("models", name)] = lsrc
        if "context_length" in llm:
            spec["context_window"] = llm["context_length"]
            origins[("models", name, "context_window")] = (*lsrc, "context_length")
        else:
            spec["context_window"] = cfg["max_context_tokens"]
        origins[("models", name, "name")] = (*lsrc, "name")
        catalogue[name] = spec
        if first_model is None:
            first_model = name
        else:
            agent = _AGENT_NAME_BAD.sub("_", name)[:128]
            agents[agent] = {"extends": "default", "model": name}
            origins[("policies", agent)] = lsrc
        for key in llm:
            if key not in DBGPT_LLM_KEYS:
                warnings.append(
                    ((*lsrc, key), f"DB-GPT llm setting {key!r} is not understood; ignored")
                )

    default: dict[str, Any] = {
        "description": "DB-GPT agent_context defaults, read from a DB-GPT config file.",
    }
    if first_model is not None:
        default["model"] = first_model
        origins[(*base, "model")] = ("models", "llms", 0, "name")
    else:
        default["model"] = {"context_window": cfg["max_context_tokens"]}
        o((*base, "model", "context_window"), "max_context_tokens")
    default["budget"] = {
        "window": cfg["max_context_tokens"],
        "reserve_output": cfg["reserved_tokens"],
        "tool_growth": 0,
        "safety_margin": 0,
    }
    o((*base, "budget", "window"), "max_context_tokens")
    o((*base, "budget", "reserve_output"), "reserved_tokens")
    default["thresholds"] = {
        "warning": cfg["warning_threshold"],
        "error": cfg["error_threshold"],
        "critical": cfg["critical_threshold"],
    }
    for state in ("warning", "error", "critical"):
        o((*base, "thresholds", state), f"{state}_threshold")
    default["pipeline"] = [
        {
            "layer": "observation_mask",
            "at": "warning",
            "options": {
                "max_age_rounds": cfg["max_observation_age_rounds"],
                "max_chars": cfg["truncated_observation_max_chars"],
            },
        },
        {
            "layer": "drop_rounds",
            "at": "warning",
            "options": {
                "keep_recent_rounds": cfg["min_keep_recent_rounds"],
                "min_keep_tokens": cfg["min_keep_tokens"],
            },
        },
        {
            "layer": "summarize",
            "at": "error",
            "options": {
                "max_failures": cfg["max_compact_failures"],
                "keep_recent_rounds": cfg["min_keep_recent_rounds"],
            },
        },
    ]
    p = (*base, "pipeline")
    o((*p, 0, "options", "max_age_rounds"), "max_observation_age_rounds")
    o((*p, 0, "options", "max_chars"), "truncated_observation_max_chars")
    o((*p, 1, "options", "keep_recent_rounds"), "min_keep_recent_rounds")
    o((*p, 1, "options", "min_keep_tokens"), "min_keep_tokens")
    o((*p, 2, "options", "max_failures"), "max_compact_failures")
    o((*p, 2, "options", "keep_recent_rounds"), "min_keep_recent_rounds")
    default["on_overflow"] = {
        "layer": "emergency",
        "options": {"keep_recent_rounds": 2, "retries": 1},
    }
    default["snapshots"] = {
        "store": "local",
        "path": "${CTXPOLICY_HOME:-~/.ctxpolicy}/workspace/op_snapshots",
        "reference": "always",
        # design A's agents open snapshots by path with their own file tools
        "reference_form": "path",
    }
    native: dict[str, Any] = {"ctxpolicy": 1}
    if catalogue:
        native["models"] = catalogue
    native["policies"] = {"default": default, **agents}
    for key in data:
        if key not in ("service", "models"):
            continue
    return native, origins, warnings


# --------------------------------------------------------------------------- design B


def _from_compression(data: dict[str, Any]) -> tuple[dict[str, Any], Origins, Warnings]:
    origins: Origins = {("policies",): ()}
    warnings: Warnings = []
    sections: dict[str, dict[str, Any]] = {k: v for k, v in data.items() if isinstance(v, dict)}
    base_sec = sections.get("default", {})
    policies: dict[str, Any] = {}
    order = (
        ["default", *[k for k in sections if k != "default"]]
        if "default" in sections
        else list(sections)
    )
    for agent in order:
        sec = sections[agent]
        for key in sec:
            if key not in COMPRESSION_KEYS:
                warnings.append(
                    ((agent, key), f"CompressionConfig setting {key!r} is not understood; ignored")
                )
        eff: dict[str, Any] = dict(COMPRESSION_DEFAULTS)
        where: dict[str, PathT] = {}
        layers = [base_sec, sec] if agent != "default" else [sec]
        names = ["default", agent] if agent != "default" else [agent]
        for layer, lname in zip(layers, names, strict=True):
            for k, v in layer.items():
                if k in ("compression_levels", "tool_preprocess") and isinstance(v, dict):
                    merged = dict(eff.get(k) or {})
                    for sk, sv in v.items():
                        if isinstance(sv, dict) and isinstance(merged.get(sk), dict):
                            merged[sk] = {**merged[sk], **sv}
                        else:
                            merged[sk] = sv
                        where[f"{k}.{sk}"] = (lname, k, sk)
                    eff[k] = merged
                else:
                    eff[k] = v
                where[k] = (lname, k)
        policies[agent] = _b_agent(agent, eff, where, origins, warnings)
    native: dict[str, Any] = {"ctxpolicy": 1, "policies": policies}
    return native, origins, warnings


def _b_agent(
    agent: str,
    eff: dict[str, Any],
    where: dict[str, PathT],
    origins: Origins,
    warnings: Warnings,
) -> dict[str, Any]:
    base: PathT = ("policies", agent)
    origins[base] = (agent,)

    def o(native: PathT, key: str) -> None:
        if key in where:
            origins[(*base, *native)] = where[key]

    out: dict[str, Any] = {
        "description": f"CompressionConfig for {agent!r}, read from a compression config file."
    }
    out["model"] = {"context_window": eff["total_window_tokens"], "name": eff["model_name"]}
    o(("model", "context_window"), "total_window_tokens")
    o(("model", "name"), "model_name")
    out["budget"] = {
        "reserve_output": eff["output_reserve_tokens"],
        "tool_growth": eff["expected_tool_growth_tokens"],
        "safety_margin": eff["safety_margin_tokens"],
        "target": eff["target_tokens_after_compression"],
    }
    o(("budget", "reserve_output"), "output_reserve_tokens")
    o(("budget", "tool_growth"), "expected_tool_growth_tokens")
    o(("budget", "safety_margin"), "safety_margin_tokens")
    o(("budget", "target"), "target_tokens_after_compression")
    levels = eff.get("compression_levels")
    if isinstance(levels, dict):
        th: dict[str, Any] = {}
        for lkey, state in (
            ("l1_threshold", "warning"),
            ("l2_threshold", "error"),
            ("l3_threshold", "critical"),
        ):
            if lkey in levels:
                th[state] = levels[lkey]
                o(("thresholds", state), f"compression_levels.{lkey}")
        for lkey in levels:
            if lkey not in ("l1_threshold", "l2_threshold", "l3_threshold"):
                warnings.append(
                    (
                        (*where.get(f"compression_levels.{lkey}", (agent,)),),
                        f"compression level {lkey!r} is not understood; ignored",
                    )
                )
        if th:
            out["thresholds"] = th
    keep = eff["keep_recent_turns"]
    pipeline: list[dict[str, Any]] = [
        {
            "layer": "observation_mask",
            "at": "warning",
            "options": {"max_age_rounds": keep, "max_chars": B_L1_MAX_CHARS},
        }
    ]
    o(("pipeline", 0, "options", "max_age_rounds"), "keep_recent_turns")
    enable_summary = eff.get("enable_summary", True)
    o(("pipeline",), "enable_summary")
    if enable_summary is not False:
        pipeline.append(
            {"layer": "summarize", "at": "error", "options": {"keep_recent_rounds": keep}}
        )
        o(("pipeline", 1, "options", "keep_recent_rounds"), "keep_recent_turns")
    pipeline.append({"layer": "offload", "at": "critical", "options": {"keep_recent_rounds": keep}})
    o(("pipeline", len(pipeline) - 1, "options", "keep_recent_rounds"), "keep_recent_turns")
    out["pipeline"] = pipeline
    constraints = eff.get("preserve_constraints")
    if isinstance(constraints, list):
        out["constraints"] = constraints
        o(("constraints",), "preserve_constraints")
    tools: dict[str, Any] = {}
    tp = eff.get("tool_preprocess")
    if isinstance(tp, dict):
        for tool, opts in tp.items():
            wkey = f"tool_preprocess.{tool}"
            if not isinstance(opts, dict):
                warnings.append(
                    (where.get(wkey, (agent,)), f"tool_preprocess.{tool} is not a mapping; ignored")
                )
                continue
            rule = _b_tool(tool, opts, where.get(wkey, (agent,)), warnings)
            if rule is None:
                continue
            tools[tool] = rule
            o(("tools", tool), wkey)
    tools["*"] = {"preprocess": "head_tail", "options": {"max_chars": B_DEFAULT_CHARS}}
    out["tools"] = tools
    return out


def _b_tool(
    tool: str, opts: dict[str, Any], src: PathT, warnings: Warnings
) -> dict[str, Any] | None:
    known: dict[str, set[str]] = {
        "read_file": {"max_lines"},
        "run_tests": {"keep_failed_only"},
        "query_database": {"max_rows", "summarize_large_result"},
    }
    if tool not in known:
        warnings.append((src, f"tool_preprocess for {tool!r} is not understood; ignored"))
        return None
    for key in opts:
        if key not in known[tool]:
            warnings.append(
                ((*src, key), f"tool_preprocess.{tool}.{key} is not understood; ignored")
            )
    if tool == "read_file":
        options: dict[str, Any] = {"lines": 50}
        if "max_lines" in opts:
            options["max_lines"] = opts["max_lines"]
        return {"preprocess": "head_tail_lines", "options": options}
    if tool == "run_tests":
        if opts.get("keep_failed_only", True) is False:
            return {"preprocess": "head_tail", "options": {"max_chars": B_DEFAULT_CHARS}}
        return {"preprocess": "test_failures", "options": {"keep_failed_only": True}}
    options = {k: opts[k] for k in ("max_rows", "summarize_large_result") if k in opts}
    return {"preprocess": "table_rows", "options": options}
