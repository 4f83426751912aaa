"""The search of ``ctxpolicy tune``: optuna, multi-objective, seeded, on a held-out split.

1. Traces are split (seeded) into tuning and held-out sets.
2. The base policy is replayed on the tuning traces; its retention is the default
   floor. Its values (snapped onto the grid) are the first trial.
3. Optuna's multi-objective TPE sampler (seeded, constraints-aware) proposes
   candidates in batches of a fixed size (ask/tell; the batch size never depends on
   the number of workers, so the study is the same on 1 process or a cluster).
   Each candidate is written as a policy diff, resolved with the project's own
   resolver (a candidate that does not validate is a failed trial with its
   diagnostic), and replayed on every tuning trace in parallel.
4. The chosen candidate is the cheapest feasible one (no avoidable overflow, no
   pairing violation, retention ≥ floor); it is replayed on the held-out traces
   next to the base policy and recommended only when it is not worse there.
5. Each changed value is reverted alone to measure its effect (ablation), for the
   comments of the diff.

Ctrl-C stops the search: the trials finished so far are kept and steps 4–5 run.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ctxpolicy.conversation.messages import call_name, tool_calls
from ctxpolicy.policy.diagnostics import PolicyError
from ctxpolicy.policy.models import Policy, TuneObjectives
from ctxpolicy.sim.parallel import Replayer
from ctxpolicy.tune.diff import resolve_body
from ctxpolicy.tune.objectives import Score, constraint_values, score
from ctxpolicy.tune.space import Param, build_space, changed, overlay

__all__ = ["Candidate", "Hooks", "TuneConfig", "TuneResult", "run_tune", "split_traces"]

#: Names of the values of :func:`constraint_values`.
CONSTRAINTS = ("avoidable_overflows", "pairing_violations", "retention_below_floor")
#: Candidates asked from optuna at once (fixed: results do not depend on --workers).
BATCH = 4


@dataclass
class TuneConfig:
    """Everything one tuning run needs (the CLI fills it)."""

    traces: list[str]
    policy_file: str
    agent: str
    window: int | None = None
    trials: int = 50
    seed: int = 0
    holdout: float = 0.3
    workers: int | None = None
    cluster: str | None = None
    storage: str | None = None
    study_name: str | None = None
    objectives: TuneObjectives = field(default_factory=TuneObjectives)
    retention_floor: float | None = None
    margin: float = 0.05
    tuned_agent: str | None = None


@dataclass
class Candidate:
    """A trial: its values, score on the tuning traces and feasibility."""

    number: int
    values: dict[str, Any]
    state: str  # "complete", "invalid", "interrupted"
    score: Score | None = None
    constraints: list[float] = field(default_factory=list)
    error: str | None = None
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return self.state == "complete" and all(c <= 0 for c in self.constraints)


@dataclass
class TuneResult:
    """What the report, the diff writer and ``--json`` show."""

    config: TuneConfig
    tuning: list[str]
    held_out: list[str]
    params: list[Param]
    base_tuning: Score
    floor: float
    candidates: list[Candidate]
    where: str
    interrupted: bool = False
    chosen: Candidate | None = None
    chosen_policy: Policy | None = None
    base_held: Score | None = None
    chosen_held: Score | None = None
    recommended: bool = False
    reasons: list[str] = field(default_factory=list)
    effects: dict[str, Score] = field(default_factory=dict)
    front: list[int] = field(default_factory=list)

    @property
    def gain(self) -> float | None:
        """Relative cost saving of the chosen policy on held-out traces."""
        if self.base_held is None or self.chosen_held is None:
            return None
        obj = self.config.objectives
        base = self.base_held.cost(obj)
        return (base - self.chosen_held.cost(obj)) / base if base else 0.0


def split_traces(names: Sequence[str], holdout: float, seed: int) -> tuple[list[str], list[str]]:
    """Seeded split into (tuning, held-out); both non-empty when there are 2+ traces
    and ``holdout`` > 0. Order inside each set follows ``names``."""
    if holdout <= 0 or len(names) < 2:
        return list(names), []
    shuffled = sorted(names)
    random.Random(seed).shuffle(shuffled)
    n = min(max(1, round(len(names) * holdout)), len(names) - 1)
    held = set(shuffled[:n])
    return [t for t in names if t not in held], [t for t in names if t in held]


def pareto_front(cands: Sequence[Candidate], obj: TuneObjectives) -> list[Candidate]:
    """Feasible candidates no other feasible one beats on both objectives."""
    ok = [c for c in cands if c.feasible and c.score is not None]

    def beats(a: Score, b: Score) -> bool:
        ca, cb, ra, rb = a.cost(obj), b.cost(obj), a.retention(obj), b.retention(obj)
        return ca <= cb and ra >= rb and (ca < cb or ra > rb)

    return [
        c
        for c in ok
        if c.score is not None
        and not any(o.score is not None and beats(o.score, c.score) for o in ok)
    ]


def _choose(cands: Sequence[Candidate], obj: TuneObjectives) -> Candidate | None:
    """The cheapest candidate of the feasible front (ties: more retention, earlier)."""
    scored = [(c, c.score) for c in pareto_front(cands, obj) if c.score is not None]
    if not scored:
        return None
    return min(scored, key=lambda cs: (cs[1].cost(obj), -cs[1].retention(obj), cs[0].number))[0]


def _from_study(
    study: Any, params: Sequence[Param], base: Policy, registry: Any
) -> list[Candidate]:
    """Every trial of the study (also other tuners' sharing it), as candidates."""
    from optuna.trial import TrialState

    out: list[Candidate] = []
    for t in study.get_trials(deepcopy=False):
        values = {p.path: p.snap(t.params.get(p.path, p.base)) for p in params}
        body, _ = overlay(base, params, values, registry=registry)
        attrs = t.user_attrs
        if t.state == TrialState.COMPLETE and "score" in attrs:
            sc = {k: v for k, v in attrs["score"].items() if k != "avoidable_overflows"}
            out.append(
                Candidate(
                    t.number,
                    values,
                    "complete",
                    score=Score(**sc),
                    constraints=list(attrs.get("constraints", [])),
                    body=body,
                )
            )
        elif t.state == TrialState.FAIL:
            state = "invalid" if "error" in attrs else "interrupted"
            out.append(Candidate(t.number, values, state, error=attrs.get("error"), body=body))
    return out


#: Python module of a database driver → the package that provides it.
DRIVER_PACKAGES = {
    "MySQLdb": "mysqlclient",
    "pymysql": "PyMySQL",
    "mysql": "mysql-connector-python",
    "psycopg2": "psycopg2-binary",
    "psycopg": "psycopg[binary]",
    "pg8000": "pg8000",
    "asyncpg": "asyncpg",
    "cx_Oracle": "cx_Oracle",
    "oracledb": "oracledb",
    "pyodbc": "pyodbc",
    "pymssql": "pymssql",
}


def check_storage(url: str) -> None:
    """A clear ``RuntimeError`` when optuna could not open the storage ``url``: an
    unknown database or a driver that is not installed (named with its package).
    The URL is shown without its password."""
    try:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError
    except ImportError:  # pragma: no cover - optuna depends on sqlalchemy
        return
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise RuntimeError(
            "--storage is not a database URL (e.g. sqlite:///tune.db, "
            "postgresql://user@host/db, mysql+pymysql://user@host/db)"
        ) from None
    shown = parsed.render_as_string(hide_password=True)
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        raise RuntimeError(
            f"--storage {shown}: unknown database {parsed.drivername!r} (SQLAlchemy has no "
            "such dialect)"
        ) from None
    try:
        loader: Any = getattr(dialect, "import_dbapi", None) or dialect.dbapi
        loader()
    except ImportError as exc:
        module = (exc.name or "").split(".")[0] or "its driver"
        package = DRIVER_PACKAGES.get(module, module)
        raise RuntimeError(
            f"--storage {shown}: the {parsed.get_backend_name()} driver is not installed "
            f"(module {module!r}): pip install {package}"
        ) from None


def _storage(url: str | None) -> Any:
    """Optuna storage for ``url``; SQLite waits for a lock instead of failing, so
    several tuners (and readers) can share one file. A missing driver is a clear
    error (:func:`check_storage`)."""
    if url is None:
        return url
    check_storage(url)
    if not url.startswith("sqlite"):
        return url
    import optuna

    return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})


def _study_name(cfg: TuneConfig) -> str:
    h = hashlib.sha256(Path(cfg.policy_file).resolve().read_bytes())
    for t in sorted(Path(p).name for p in cfg.traces):
        h.update(t.encode())
    return f"ctxpolicy-{cfg.agent}-w{cfg.window or 0}-s{cfg.seed}-{h.hexdigest()[:12]}"


class Hooks(Protocol):
    """Progress callbacks (the CLI's rich progress bars)."""

    def trials(self, done: int, total: int) -> None: ...

    def replays(self, done: int, total: int, name: str) -> None: ...

    def phase(self, text: str) -> None: ...


class _Silent:
    def trials(self, done: int, total: int) -> None:
        return None

    def replays(self, done: int, total: int, name: str) -> None:
        return None

    def phase(self, text: str) -> None:
        return None


def run_tune(
    cfg: TuneConfig,
    base: Policy,
    *,
    hooks: Hooks | None = None,
    stop: Callable[[], bool] | None = None,
) -> TuneResult:
    """Run a tuning study; see the module docstring. Never writes files but its
    candidates' temporary policy files and optuna's ``storage``."""
    import optuna

    from ctxpolicy.plugins import get_registry
    from ctxpolicy.policy.catalogue import load_prices

    hooks = hooks or _Silent()
    obj = cfg.objectives
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with (
        Replayer(cfg.traces, workers=cfg.workers, cluster=cfg.cluster, prices=load_prices()) as rp,
        tempfile.TemporaryDirectory(prefix="ctxpolicy-tune-") as work,
    ):
        tuning, held = split_traces(rp.names, cfg.holdout, cfg.seed)
        tools = {call_name(tc) for n in tuning for m in rp.messages(n) for tc in tool_calls(m)}
        registry = get_registry()
        params = build_space(base, registry=registry, window=cfg.window, tool_names=tools)

        def evaluate(policies: Sequence[Policy], traces: Sequence[str]) -> list[Score]:
            jobs = [(t, p, cfg.window, f"c{i}") for i, p in enumerate(policies) for t in traces]
            out = rp.run(jobs, progress=hooks.replays) if jobs else []
            k = len(traces)
            return [score(out[i * k : (i + 1) * k]) for i in range(len(policies))]

        hooks.phase("base policy")
        base_tuning = evaluate([base], tuning)[0]
        floor = (
            cfg.retention_floor if cfg.retention_floor is not None else base_tuning.retention(obj)
        )

        def constraints(trial: Any) -> Sequence[float]:
            return list(trial.user_attrs.get("constraints", [1.0, 1.0, 1.0]))

        # optuna ≥ 5 records constraints on the trial; older versions ask a callback
        per_trial = hasattr(optuna.trial.Trial, "set_constraint")
        legacy: dict[str, Any] = {} if per_trial else {"constraints_func": constraints}
        sampler = optuna.samplers.TPESampler(
            seed=cfg.seed,
            n_startup_trials=max(4, min(10, cfg.trials // 4)),
            multivariate=True,
            **legacy,
        )
        study = optuna.create_study(
            directions=["minimize", "maximize"],
            sampler=sampler,
            storage=_storage(cfg.storage),
            study_name=cfg.study_name or (_study_name(cfg) if cfg.storage else None),
            load_if_exists=True,
        )
        if not study.trials:
            study.enqueue_trial({p.path: p.snap(p.base) for p in params})
        interrupted = False
        batch: list[Any] = []
        done = 0
        hooks.phase("search")
        hooks.trials(0, cfg.trials)
        try:
            while done < cfg.trials and not (stop is not None and stop()):
                batch = []
                asked: list[tuple[Any, dict[str, Any]]] = []
                for _ in range(min(BATCH, cfg.trials - done)):
                    # each suggestion is a write too; one by one: an interrupt knows each
                    with _storage_write():
                        trial = study.ask()
                        batch.append(trial)
                        asked.append((trial, {p.path: p.suggest(trial) for p in params}))
                pending: list[tuple[Any, Policy]] = []
                for trial, values in asked:
                    body, _ = overlay(base, params, values, registry=registry)
                    try:
                        pol = resolve_body(
                            body, base_file=cfg.policy_file, agent=_tuned(cfg), workdir=work
                        )
                    except PolicyError as exc:
                        error = "; ".join(d.message for d in exc.diagnostics[:3])
                        with _storage_write():
                            trial.set_user_attr("error", error)
                            study.tell(trial, state=optuna.trial.TrialState.FAIL)
                        continue
                    pending.append((trial, pol))
                scores = evaluate([p for _, p in pending], tuning)
                for (trial, _), s in zip(pending, scores, strict=True):
                    cons = constraint_values(s, obj, floor)
                    with _storage_write():
                        trial.set_user_attr("constraints", cons)
                        if per_trial:
                            for key, v in zip(CONSTRAINTS, cons, strict=True):
                                trial.set_constraint(key, v)
                        trial.set_user_attr("score", s.to_dict())
                        study.tell(trial, [s.cost(obj), s.retention(obj)])
                done += len(batch)
                hooks.trials(done, cfg.trials)
        except KeyboardInterrupt:
            interrupted = True
            # ours still running (asked, not yet told: ask the storage)
            running = {
                t.number
                for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            }
            with _storage_write():
                for t in batch:
                    if t.number in running:
                        study.tell(t, state=optuna.trial.TrialState.FAIL)
        candidates = _from_study(study, params, base, registry)

        result = TuneResult(
            config=cfg,
            tuning=tuning,
            held_out=held,
            params=params,
            base_tuning=base_tuning,
            floor=floor,
            candidates=candidates,
            where=rp.where,
            interrupted=interrupted,
        )
        result.front = [c.number for c in pareto_front(candidates, obj)]
        chosen = _choose(candidates, obj)
        result.chosen = chosen
        if chosen is None:
            result.reasons.append(
                "no candidate met the constraints (0 avoidable overflows, 0 pairing "
                f"violations, retention ≥ {floor:.1%}) on the tuning traces"
            )
            return result
        try:
            hooks.phase("effects")
            ctx = _Ctx(base, params, cfg, registry, work, evaluate, tuning)
            result.effects = _effects(ctx, chosen)
            chosen, result.effects = _prune(ctx, chosen, result.effects)
            result.chosen = chosen
            policy = ctx.resolve(chosen.values)
            result.chosen_policy = policy
            hooks.phase("held-out")
            evals = held if held else tuning
            result.base_held, result.chosen_held = evaluate([base, policy], evals)
            result.recommended, result.reasons = _judge(
                result.base_held, result.chosen_held, obj, bool(changed(params, chosen.values))
            )
            if not held:
                result.reasons.append("no held-out traces: compared on the tuning traces")
        except KeyboardInterrupt:
            result.interrupted = True
            if result.chosen_held is None:
                result.recommended = False
                result.reasons.append("interrupted before the held-out comparison")
        return result


@contextlib.contextmanager
def _storage_write() -> Iterator[None]:
    """Hold a Ctrl-C back while optuna writes to its storage.

    An interrupt inside a database commit surfaces as optuna's
    ``StorageInternalError`` (the driver's rollback fails), not as
    ``KeyboardInterrupt``, and can leave a trial half-written. The write finishes,
    then the interrupt is raised. Signals reach only the main thread, so elsewhere
    this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if caught and callable(previous):
        previous(signal.SIGINT, None)  # the default handler raises KeyboardInterrupt


@dataclass
class _Ctx:
    """What ablation needs: the base, the space and a way to score policies."""

    base: Policy
    params: Sequence[Param]
    cfg: TuneConfig
    registry: Any
    work: str
    evaluate: Callable[[Sequence[Policy], Sequence[str]], list[Score]]
    traces: Sequence[str]

    def resolve(self, values: Mapping[str, Any]) -> Policy:
        body, _ = overlay(self.base, self.params, values, registry=self.registry)
        return resolve_body(
            body, base_file=self.cfg.policy_file, agent=_tuned(self.cfg), workdir=self.work
        )

    def reverted(self, values: Mapping[str, Any], paths: Sequence[str]) -> dict[str, Any]:
        back = {p.path: p.snap(p.base) for p in self.params if p.path in paths}
        return {**values, **back}


def _effects(ctx: _Ctx, chosen: Candidate) -> dict[str, Score]:
    """Score on the tuning traces with each changed value reverted alone."""
    paths: list[str] = []
    pols: list[Policy] = []
    for p in changed(ctx.params, chosen.values):
        try:
            pols.append(ctx.resolve(ctx.reverted(chosen.values, [p.path])))
        except PolicyError:
            continue  # reverting this one alone is not a valid policy
        paths.append(p.path)
    return dict(zip(paths, ctx.evaluate(pols, ctx.traces), strict=True)) if pols else {}


def _prune(
    ctx: _Ctx, chosen: Candidate, effects: dict[str, Score]
) -> tuple[Candidate, dict[str, Score]]:
    """Revert together every change that alone has no measured effect, when that
    leaves the score on the tuning traces unchanged: the diff keeps what matters."""
    idle = [path for path, s in effects.items() if s == chosen.score]
    if not idle:
        return chosen, effects
    values = ctx.reverted(chosen.values, idle)
    try:
        (s,) = ctx.evaluate([ctx.resolve(values)], ctx.traces)
    except PolicyError:
        return chosen, effects
    if s != chosen.score:
        return chosen, effects
    pruned = Candidate(
        chosen.number,
        values,
        chosen.state,
        score=s,
        constraints=chosen.constraints,
        body=overlay(ctx.base, ctx.params, values, registry=ctx.registry)[0],
    )
    return pruned, _effects(ctx, pruned)


def _tuned(cfg: TuneConfig) -> str:
    return cfg.tuned_agent or f"{cfg.agent}_tuned"


def _judge(
    base: Score, cand: Score, obj: TuneObjectives, any_change: bool
) -> tuple[bool, list[str]]:
    """Is the candidate at least as good as the base on held-out traces?"""
    if not any_change:
        return False, ["the base policy is already the best candidate found"]
    why: list[str] = []
    if cand.avoidable > base.avoidable:
        why.append(
            f"more avoidable overflows on held-out traces ({cand.avoidable} > {base.avoidable})"
        )
    if cand.pairing > base.pairing:
        why.append(f"more pairing violations on held-out traces ({cand.pairing} > {base.pairing})")
    if cand.retention(obj) < base.retention(obj):
        why.append(
            f"lower retention on held-out traces ({cand.retention(obj):.2%} < {base.retention(obj):.2%})"
        )
    if cand.cost(obj) >= base.cost(obj):
        why.append(f"no cheaper on held-out traces ({cand.cost(obj):,.6g} ≥ {base.cost(obj):,.6g})")
    return not why, why
