"""The policy DSL as pydantic models: the single source of truth.

Validation, the committed JSON Schema (``schemas/ctxpolicy.schema.json``) and the
DSL reference (``docs/policy-reference.md``) are all generated from these classes.
Component ``options`` are plain mappings here; they are validated by the options
model of the named component, looked up in the plugin registry (see
``ctxpolicy.resolve.load``), and their schemas are merged into the published
schema by ``ctxpolicy.resolve.schema``.

Nothing in here imports tiktoken, the engine, or any plugin: ``ctxpolicy validate``
must start fast.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ctxpolicy.policy.scalars import (
    PERCENT_RE,
    Amount,
    Percent,
    TriggerState,
)

FORMAT_VERSION = 1


class StrictModel(BaseModel):
    """Base of every DSL model: unknown keys are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ComponentOptions(StrictModel):
    """Base class of every component's ``Options`` model (layers, preprocessors, ...)."""


# --------------------------------------------------------------------------- models


class ModelSpec(StrictModel):
    """A model the agent talks to: its window and how to count its tokens."""

    context_window: int = Field(gt=0, description="Context window of the model, in tokens.")
    max_output_tokens: int | None = Field(
        default=None,
        gt=0,
        description="Largest completion the model may produce; used as the default "
        "`budget.reserve_output` when the policy does not set one.",
    )
    tokenizer: str | list[str] | None = Field(
        default=None,
        description="Tokenizer fallback chain, tried in order. Each entry is "
        "`backend`, `backend:encoding` or a bare encoding name (that vocabulary from "
        "any exact backend: `tiktoken:<encoding>`, then `quicktok:<encoding>`), e.g. "
        "`[o200k_base, heuristic]`. "
        "Unset: derived from the model name, ending in `heuristic`. Every fallback "
        "emits a `tokenizer.fallback` event.",
    )
    name: str | None = Field(
        default=None,
        description="Provider's model id, when it differs from the catalogue key "
        "(used to pick an encoding).",
    )


# --------------------------------------------------------------------------- budget


class LearnSpec(StrictModel):
    """How to learn the expected growth from this session's tool results."""

    quantile: float = Field(
        default=0.95, gt=0, le=1, description="Quantile of recent tool-result sizes to reserve."
    )
    window: int = Field(
        default=20, ge=1, le=10_000, description="How many recent tool results to look at."
    )


class ToolGrowth(StrictModel):
    """Learned reserve for the next tool results (`expected_tool_growth` of a `CompressionConfig`)."""

    learn: LearnSpec = Field(default_factory=LearnSpec, description="Learning parameters.")
    initial: Amount = Field(
        default=6000, description="Reserve used until enough tool results are seen."
    )
    min: Amount = Field(default=0, description="Lower bound of the learned reserve.")
    max: Amount | None = Field(
        default=None, description="Upper bound of the learned reserve (unset: 50% of window)."
    )


_TARGET_EXPECTED = {
    "expected": "a fraction of the trigger between 0 and 1 (e.g. 0.7), a percentage of the "
    'trigger between 0% and 100% (e.g. "70%"), or a number of tokens above 100'
}


class Budget(StrictModel):
    """Budget arithmetic: ``trigger = window − reserve_output − tool_growth − safety_margin``."""

    window: int | None = Field(
        default=None,
        gt=0,
        description="Override of the window in tokens; the smaller of this and the "
        "model's `context_window` is used.",
    )
    reserve_output: Amount | None = Field(
        default=None,
        description='Tokens kept free for the reply (tokens or "25%"). Unset: the '
        "model's `max_output_tokens`, else 4096.",
    )
    tool_growth: Amount | ToolGrowth = Field(
        default=0,
        description="Expected growth before the next check: a fixed amount, "
        "or `{learn: {...}, initial: ...}` to learn it from the session's tool results.",
    )
    safety_margin: Amount = Field(
        default=0, description="Extra slack for counting error and framing overhead."
    )
    target: Annotated[float, Field(gt=0, lt=1)] | Annotated[int, Field(gt=1)] | Percent = Field(
        default=0.7,
        description="Where compaction stops: a fraction of the trigger (0–1), the same "
        'as a percentage of the trigger ("70%" is 0.7), or absolute tokens (an integer '
        "above 100; 100 or less is a percentage missing its `%`: an error, CTX209). Keep it below the lowest "
        "`at` threshold (CTX210 otherwise): the gap is the hysteresis band one compaction "
        "buys (equal to `warning`: stop as soon as the context is back under warning, the "
        "DB-GPT behaviour).",
    )
    min_gain: Amount = Field(
        default="3%",
        description="Smallest gain (tokens or a share of the window) for which a "
        "compaction rewrites the already-sent prefix (losing the prompt cache of "
        "everything after the first changed message): the layers of one call that "
        "together free less are not taken until the request would not fit "
        "(`window − reserve_output − safety_margin`). 0: any gain is taken (a rewrite "
        "must still pay for itself under the model's cache prices).",
    )

    @field_validator("target", mode="wrap")
    @classmethod
    def _target(cls, value: Any, handler: Any) -> float | int:
        """One message for every wrong target (not one per union branch), and a
        percentage read as the fraction of the trigger it names."""
        try:
            out = handler(value)
        except ValidationError:
            raise PydanticCustomError(
                "ctx_expected", "must be {expected}", _TARGET_EXPECTED
            ) from None
        if isinstance(out, str):
            m = PERCENT_RE.match(out)
            pct = float(m.group(1)) if m else -1.0
            if not 0 < pct < 100:
                raise PydanticCustomError(
                    "ctx_expected", "must be {expected}", _TARGET_EXPECTED
                ) from None
            return pct / 100.0
        return out


class Thresholds(StrictModel):
    """State boundaries as fractions of the trigger."""

    warning: float = Field(default=0.70, gt=0, le=1, description="Ratio at which `warning` starts.")
    error: float = Field(default=0.90, gt=0, le=1, description="Ratio at which `error` starts.")
    critical: float = Field(
        default=0.95, gt=0, le=1, description="Ratio at which `critical` starts."
    )


# --------------------------------------------------------------------------- tuning


#: Bounds of a searched value, and grid points of a stepped range at most.
MAX_TUNE_VALUE = 1e15
MAX_TUNE_POINTS = 1_000_000
#: Paths of the budget and thresholds that ``ctxpolicy tune`` can search.
TUNABLE_POLICY_PATHS = frozenset(
    {
        "budget.target",
        "budget.safety_margin",
        "budget.reserve_output",
        "budget.tool_growth",
        "budget.tool_growth.initial",
        "budget.tool_growth.learn.quantile",
        "budget.tool_growth.learn.window",
        "thresholds.warning",
        "thresholds.error",
        "thresholds.critical",
    }
)
TUNE_COMPONENT_PATH = re.compile(
    r"^(pipeline|tools)\[(?P<key>[^\]]{1,200})\]\.(?P<opt>[A-Za-z][A-Za-z0-9_]{0,63})$"
)


class TuneRange(StrictModel):
    """A searched value of ``ctxpolicy tune``: an int or float range, or choices.

    Also what components declare in their ``tune_space`` class variable.
    """

    low: int | float | None = Field(default=None, description="Smallest value tried.")
    high: int | float | None = Field(default=None, description="Largest value tried.")
    step: int | float | None = Field(
        default=None, gt=0, description="Grid step (unset: any int, or any float)."
    )
    log: bool = Field(default=False, description="Sample on a log scale (`low` must be > 0).")
    percent: bool = Field(
        default=False,
        description="Search a share of the window in percent, so the range scales with "
        'the window: budget amounts are written as "N%", a component option in tokens '
        "as the tokens of that share.",
    )
    choices: list[str | int | float | bool] | None = Field(
        default=None, min_length=1, description="Values tried instead of a range."
    )

    @property
    def is_int(self) -> bool:
        """An integer range (both bounds and the step are ints)."""
        return (
            self.choices is None
            and all(isinstance(v, int) for v in (self.low, self.high))
            and (self.step is None or isinstance(self.step, int))
        )

    @model_validator(mode="after")
    def _shape(self) -> TuneRange:
        if self.choices is not None:
            if self.low is not None or self.high is not None or self.log or self.step:
                raise ValueError("give either `choices` or `low`/`high`, not both")
            return self
        if self.low is None or self.high is None:
            raise ValueError("a range needs both `low` and `high` (or `choices`)")
        for name, v in (("low", self.low), ("high", self.high), ("step", self.step)):
            if v is not None and not (math.isfinite(v) and abs(v) <= MAX_TUNE_VALUE):
                raise ValueError(f"`{name}` must be a finite number within ±{MAX_TUNE_VALUE:g}")
        if self.low >= self.high:
            raise ValueError(f"`low` ({self.low}) must be below `high` ({self.high})")
        if self.step is not None:
            points = (self.high - self.low) / self.step
            if points > MAX_TUNE_POINTS:
                raise ValueError(
                    f"`step` {self.step:g} makes {points:.3g} grid points from {self.low:g} "
                    f"to {self.high:g}; at most {MAX_TUNE_POINTS:,} (use a larger step)"
                )
        if self.log and (self.low <= 0 or self.step not in (None, 1)):
            raise ValueError("a log range needs `low` > 0 and no `step` other than 1")
        return self


class TuneObjectives(StrictModel):
    """What ``ctxpolicy tune`` trades off, measured exactly as ``simulate`` does."""

    cost: Literal["total", "billed", "tokens", "usd"] = Field(
        default="total",
        description="Minimised: `total` — billed input under prompt caching plus the "
        "summarizer's LLM calls (simulate's price model, docs/simulate.md); `billed` — "
        "the billed input alone; `tokens` — prompt tokens summed over every call; `usd` "
        "— the estimated cost in USD (simulate's price table).",
    )
    retention: Literal["in_context", "far", "retained", "instructions"] = Field(
        default="in_context",
        description="Maximised: share of the facts the agent reused that were in the "
        "text sent (`in_context`, the ruler), of those absent from the 6 messages before "
        "(`far`), or in context or recoverable from a snapshot referenced there "
        "(`retained`); or the share of the user's turns (instructions, constraints) "
        "still sent verbatim (`instructions`).",
    )


class TuneSpec(StrictModel):
    """How ``ctxpolicy tune`` searches this agent's numbers (docs/tune.md).

    The search space starts from the defaults each component declares; ``only`` and
    ``exclude`` (globs over parameter paths such as ``pipeline[drop_rounds].*``) narrow
    it, ``space`` overrides or adds ranges. Command-line options win over these.
    """

    trials: int | None = Field(default=None, ge=1, description="Trials (default 50).")
    holdout: float | None = Field(
        default=None, ge=0, lt=1, description="Share of traces held out (default 0.3)."
    )
    objectives: TuneObjectives = Field(
        default_factory=TuneObjectives, description="Cost and retention measures."
    )
    retention_floor: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Least retention a candidate may have (default: the base policy's "
        "on the tuning traces).",
    )
    only: list[str] = Field(
        default_factory=list, description="Search only parameters matching these globs."
    )
    exclude: list[str] = Field(
        default_factory=list, description="Never search parameters matching these globs."
    )
    space: dict[str, TuneRange] = Field(
        default_factory=dict,
        description="Ranges by parameter path (`budget.target`, `thresholds.warning`, "
        "`pipeline[observation_mask].max_age_rounds`, `tools[*].max_chars`), "
        "replacing the default range or adding a parameter.",
    )

    @field_validator("space")
    @classmethod
    def _real_paths(cls, v: dict[str, TuneRange]) -> dict[str, TuneRange]:
        for path in v:
            if path not in TUNABLE_POLICY_PATHS and not TUNE_COMPONENT_PATH.match(path):
                raise ValueError(
                    f"{path!r} is not a tunable parameter path: one of "
                    + ", ".join(sorted(TUNABLE_POLICY_PATHS))
                    + ", pipeline[LAYER].OPTION or tools[GLOB].OPTION"
                )
        return v


# --------------------------------------------------------------------------- components


class PipelineStep(StrictModel):
    """One compaction layer in the pipeline (order = order of execution)."""

    layer: str = Field(description="Name of a registered layer, e.g. `observation_mask`.")
    at: TriggerState = Field(
        default="warning",
        description="Lowest entry state at which the layer may run: when a call starts "
        "compaction (above `target`), every step whose `at` is at or below the state at "
        "that moment runs, in order, recounting after each, until usage ≤ `target`.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Options of the layer, validated by its own model."
    )
    enabled: bool = Field(default=True, description="Set false to keep a layer but skip it.")


class OverflowStep(StrictModel):
    """The reactive layer run on a provider's context-overflow error."""

    layer: str = Field(default="emergency", description="Name of a registered layer.")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of the layer.")


class PreprocessStep(StrictModel):
    """One preprocessor of a chain (an item of a list ``preprocess``)."""

    name: str = Field(description="Name of a registered preprocessor.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Options of this preprocessor."
    )


class ToolRule(StrictModel):
    """How results of matching tools are preprocessed before entering the context."""

    preprocess: str | list[str | PreprocessStep] = Field(
        default="head_tail",
        description="Name of a registered preprocessor, or a list of them run in order, "
        "each on the output of the one before: an item is a name or `{name, options}` "
        "(`[redact, {name: table_rows, options: {max_rows: 10}}]`).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of the preprocessor when `preprocess` names one (a list "
        "gives each item its own `options`).",
    )
    snapshot: bool = Field(default=True, description="Write the full result to the snapshot store.")
    max_tokens: Amount | None = Field(
        default=None,
        description="At most this much of one result enters the context, in estimated "
        'tokens or as a share of the window (`"6%"`: about 2,000 characters at 8k, 4,000 '
        "at 16k): after the preprocessors, a longer text keeps its head and tail. A "
        "`head_tail` step without a `max_tokens` of its own takes this one (its "
        "`max_chars` is then ignored), so one rule keeps more of a result on a larger "
        "window.",
    )
    aliases: list[str] = Field(
        default_factory=list,
        description="More tool names (or globs) this rule applies to, as if each were "
        "its key: one rule for a tool every client names its own way (`Bash`, "
        "`exec_command`, `shell`).",
    )
    ignore_case: bool = Field(
        default=False,
        description="Match the key and the aliases without regard to case (`bash` matches `Bash`).",
    )

    @field_validator("preprocess")
    @classmethod
    def _not_empty(cls, v: str | list[str | PreprocessStep]) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("an empty list: name at least one preprocessor")
        return v

    @field_validator("options")
    @classmethod
    def _options_of_one(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if v and isinstance(info.data.get("preprocess"), list):
            raise ValueError(
                "`options` goes with a single preprocessor: in a list give each item "
                "its own, as {name: ..., options: {...}}"
            )
        return v

    @field_validator("aliases")
    @classmethod
    def _no_empty_aliases(cls, v: list[str]) -> list[str]:
        if any(not a.strip() for a in v):
            raise ValueError("an alias must not be empty")
        return v

    def steps(self) -> list[tuple[str, dict[str, Any]]]:
        """``(name, options)`` of each preprocessor, in the order they run."""
        if isinstance(self.preprocess, str):
            return [(self.preprocess, self.options)]
        return [(p, {}) if isinstance(p, str) else (p.name, p.options) for p in self.preprocess]

    @property
    def preprocessor_name(self) -> str:
        """The preprocessor's name; a chain's names joined by ``+`` (``redact+table_rows``)."""
        if isinstance(self.preprocess, str):
            return self.preprocess
        return "+".join(name for name, _ in self.steps())


class Snapshots(StrictModel):
    """Where full tool results are kept so that nothing compacted is lost."""

    enabled: bool = Field(default=True, description="Write snapshots at all.")
    store: str = Field(default="local", description="Name of a registered snapshot store.")
    path: str = Field(
        default="${CTXPOLICY_HOME:-~/.ctxpolicy}/snapshots",
        description="Root of the store (path or URL); `${NAME}`, `${NAME:-default}` and "
        "`${env:NAME}` are interpolated, `~` expanded. It is only ever used as a path.",
    )
    reference: Literal["always", "when_shortened"] = Field(
        default="when_shortened",
        description="When the context text of a tool result carries the line "
        "`[Full detail available at: <ref>]`: `always`, or only when the "
        "preprocessor shortened it (saves ~40 tokens per untouched result; layers add "
        "the line when they cut the result later).",
    )
    reference_form: Literal["uri", "path"] = Field(
        default="uri",
        description="What the reference line names: `uri` "
        "(`[Full detail available at: ctxsnap://<conv>/<name>]`, portable: the same "
        "bytes on every worker and machine, no local path in a prompt), or `path` "
        "(`[Full detail available at: <path> (<uri>)]`, as DB-GPT writes it, for agents that "
        "open snapshots with their own file tools; the path is machine-specific, so "
        "workers with different store roots send different prompts).",
    )
    max_snapshot_bytes: int = Field(
        default=16 * 1024 * 1024, gt=0, description="Largest observation written per snapshot."
    )
    max_age_days: float | None = Field(
        default=None,
        gt=0,
        description="Remove snapshots older than this (overrides the store's own "
        "`max_age_days`, 30 for `local`); applied while sessions write and by "
        "`ctxpolicy snapshots prune`.",
    )
    max_total_mb: float | None = Field(
        default=None,
        gt=0,
        description="Keep the store below this size (overrides the store's own "
        "`max_total_mb`, 1024 for `local`); applied while sessions write and by "
        "`ctxpolicy snapshots prune`.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Options of the snapshot store."
    )


class Pinned(StrictModel):
    """Messages that no layer may remove or rewrite."""

    system: bool = Field(default=True, description="Keep every system message.")
    first_user: bool = Field(default=True, description="Keep the first user message (the task).")
    last_user: bool = Field(
        default=True, description="Keep the last user message (always enforced by the engine)."
    )


class Ledger(StrictModel):
    """The progress ledger: facts extracted from compacted history, kept pinned."""

    enabled: bool = Field(default=True, description="Maintain and pin the ledger.")
    max_tokens: Annotated[int, Field(ge=64)] | Percent = Field(
        default=1500,
        description="Upper bound of its rendered size: tokens, or a percentage of the window "
        "(`'6%'`: the ledger scales with the window a policy is used at).",
    )


class CacheSpec(StrictModel):
    """Prompt-cache awareness: change the prefix rarely."""

    preserve_prefix: bool = Field(
        default=False, description="Compact in batches so the cached prefix changes rarely."
    )
    min_gain_tokens: int = Field(
        default=0, ge=0, description="A compaction must free at least this many tokens."
    )


class StateSpec(StrictModel):
    """Durable session state: where a conversation's decisions, summaries and ledger live.

    With the default (`sqlite`, a file beside the snapshots) an agent that restarts
    with the same `conv_id` resumes where it stopped; `postgres` lets a fleet of
    workers share conversations; `memory` keeps nothing after the process (see
    docs/state.md).
    """

    store: str = Field(
        default="sqlite",
        description="Name of a registered state store: `sqlite`, `postgres`, `memory` "
        "or a plugin's.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Options of the state store, validated by its model."
    )
    max_conflict_retries: int = Field(
        default=3,
        ge=0,
        le=100,
        description="How often a call whose save lost a compare-and-set race against "
        "another worker reloads the state and redoes its work before it fails (each "
        "conflict is a `state.conflict` event).",
    )
    max_age_days: float | None = Field(
        default=30,
        gt=0,
        description="Conversations whose state was last saved longer ago than this are "
        "deleted from the store, at most once an hour per store and process, when a "
        "session opens it (a `state.pruned` event); the snapshot store's default age "
        "limit is the same. null: keep state forever.",
    )


class AgentPolicy(StrictModel):
    """Policy of one agent type. Every field may be inherited through `extends`."""

    extends: str | None = Field(
        default=None, description="Agent whose policy this one deep-merges over."
    )
    description: str | None = Field(default=None, description="What this agent does.")
    model: str | ModelSpec | None = Field(
        default=None, description="A key of `models:` or an inline model spec."
    )
    budget: Budget = Field(default_factory=Budget, description="Budget arithmetic.")
    thresholds: Thresholds = Field(default_factory=Thresholds, description="State boundaries.")
    pipeline: list[PipelineStep] = Field(
        default_factory=list, description="Compaction layers, in order."
    )
    on_overflow: OverflowStep = Field(
        default_factory=OverflowStep, description="Reactive layer on a context-overflow error."
    )
    tools: dict[str, ToolRule] = Field(
        default_factory=dict,
        description="Tool-name globs → preprocessing. A rule whose key or alias is the "
        "tool's name wins; else the first glob that matches, in order; `*` last.",
    )
    snapshots: Snapshots = Field(default_factory=Snapshots, description="Snapshot store.")
    pinned: Pinned = Field(default_factory=Pinned, description="Messages never compacted.")
    ledger: Ledger = Field(default_factory=Ledger, description="Progress ledger.")
    constraints: list[str] = Field(
        default_factory=list,
        description="Constraints kept verbatim through every layer (`preserve_constraints` "
        "of a `CompressionConfig`).",
    )
    cache: CacheSpec = Field(default_factory=CacheSpec, description="Prompt-cache awareness.")
    state: StateSpec = Field(
        default_factory=StateSpec, description="Durable session state (resume, fleets)."
    )
    tune: TuneSpec = Field(
        default_factory=TuneSpec, description="Search space of `ctxpolicy tune`."
    )

    @field_validator("tools")
    @classmethod
    def _no_empty_globs(cls, v: dict[str, ToolRule]) -> dict[str, ToolRule]:
        for key in v:
            if not key.strip():
                raise ValueError("a tool glob must not be empty")
        return v


class PolicyFile(StrictModel):
    """A ctxpolicy policy file."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        defer_build=True,
        populate_by_name=True,
        title="ctxpolicy policy file",
    )

    schema_: str | None = Field(
        default=None,
        alias="$schema",
        description="Optional pointer to the JSON Schema (for editors).",
    )
    ctxpolicy: Literal[1] = Field(description="Format version; must be 1.")
    include: list[str] = Field(
        default_factory=list,
        description="Other policy files (relative paths) whose models and policies "
        "this file can use and extend.",
    )
    models: dict[str, ModelSpec] = Field(
        default_factory=dict, description="Model catalogue, by name."
    )
    policies: dict[str, AgentPolicy] = Field(
        default_factory=dict, description="Policies by agent type."
    )

    @model_validator(mode="after")
    def _policy_names(self) -> PolicyFile:
        for name in self.policies:
            if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,128}", name):
                raise ValueError(f"agent name {name!r} may only use letters, digits, '_', '-', '.'")
        return self


# --------------------------------------------------------------------------- resolved


class ResolvedStep(StrictModel):
    """A pipeline step whose options were validated and completed by its component."""

    layer: str
    at: TriggerState = "warning"
    options: dict[str, Any] = Field(default_factory=dict)


class Policy(StrictModel):
    """A resolved policy: `extends` merged, env interpolated, model and components checked.

    Produced by :func:`ctxpolicy.load_policy`; this is what the engine runs.
    """

    agent: str = Field(description="Agent type this policy is for.")
    source: str | None = Field(default=None, description="File it was loaded from.")
    description: str | None = None
    model_name: str | None = Field(default=None, description="Catalogue key of the model.")
    model: ModelSpec
    budget: Budget
    thresholds: Thresholds
    pipeline: list[ResolvedStep]
    on_overflow: ResolvedStep
    tools: dict[str, ToolRule]
    snapshots: Snapshots
    pinned: Pinned
    ledger: Ledger
    constraints: list[str]
    cache: CacheSpec
    state: StateSpec = Field(default_factory=StateSpec)
    tune: TuneSpec = Field(default_factory=TuneSpec)
