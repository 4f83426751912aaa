"""Parallel replays: on local worker processes or on a Dask cluster.

Replays are pure (same trace, policy and window → same metrics), so they can run
anywhere and in any order; every function here returns results **in submission
order**, whatever the number of workers, which keeps ``simulate`` and ``tune``
deterministic regardless of ``--workers`` or ``--cluster``.

* :func:`default_workers` — the CPUs this process may use (``--workers`` default);
* :func:`map_ordered` — ``[fn(*a) for a in args]`` on a local process pool;
* :class:`Replayer` — replays of a fixed set of traces under many policies, on a
  persistent local pool (traces loaded and prepared once per worker process) or on
  a ``dask.distributed`` cluster (prepared traces shipped to the workers once with
  ``Client.scatter``, results gathered). A replay's metrics are remembered (bounded)
  and a replay asked again — same trace, same policy, same window — is not run
  again (:class:`ReplayMemo`).

Worker processes ignore SIGINT: Ctrl-C reaches the parent only, which decides what
to keep (``tune`` writes the best so far) and then shuts the pool down.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxpolicy._install import extra_hint
from ctxpolicy.conversation.lru import Lru
from ctxpolicy.sim.prepared import PreparedTrace, prepare_trace

if TYPE_CHECKING:
    from ctxpolicy.policy.models import Policy

__all__ = [
    "Progress",
    "ReplayMemo",
    "Replayer",
    "default_workers",
    "map_ordered",
    "replay_metrics",
]

Message = dict[str, Any]
#: ``progress(done, total, name)`` after each finished item.
Progress = Callable[[int, int, str], None]


def default_workers() -> int:
    """CPUs this process may run on (the affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _init_worker(environ: dict[str, str]) -> None:
    """A worker ignores Ctrl-C (the parent stops the pool) and sees the parent's
    environment as it is now: forkserver workers inherit the environment of the
    forkserver, started once per process, and ``${VAR}`` in a policy (a snapshot path
    shown in references, so counted in the context) must resolve as it does inline."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(environ)


def _local_executor(workers: int) -> ProcessPoolExecutor:
    # forkserver/spawn: the parent may run threads (rich's refresh, optuna), fork is unsafe
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(dict(os.environ),),
    )


def map_ordered(
    fn: Callable[..., Any],
    args: Sequence[Sequence[Any]],
    *,
    workers: int = 1,
    progress: Progress | None = None,
    names: Sequence[str] | None = None,
) -> list[Any]:
    """``[fn(*a) for a in args]``, on ``workers`` local processes when > 1.

    Results keep the order of ``args``; ``progress(done, total, names[i])`` is called
    as items finish (in completion order).
    """
    total = len(args)
    labels = list(names) if names is not None else [str(i) for i in range(total)]
    out: list[Any] = [None] * total
    if workers <= 1 or total <= 1:
        for i, a in enumerate(args):
            out[i] = fn(*a)
            if progress is not None:
                progress(i + 1, total, labels[i])
        return out
    with _local_executor(min(workers, total)) as pool:
        futures = {pool.submit(fn, *a): i for i, a in enumerate(args)}
        try:
            for done, fut in enumerate(as_completed(futures), start=1):
                i = futures[fut]
                out[i] = fut.result()
                if progress is not None:
                    progress(done, total, labels[i])
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return out


# --------------------------------------------------------------------------- replays


@functools.lru_cache(maxsize=64)
def _load_cached(path: str) -> PreparedTrace:
    from ctxpolicy.sim.importers import load_trace

    return prepare_trace(load_trace(path))


def replay_metrics(
    source: str | Sequence[Mapping[str, Any]] | PreparedTrace,
    policy: Policy,
    window: int | None,
    trace: str,
    label: str | None = None,
    prices: Mapping[str, Any] | None = None,
    keep_series: bool = False,
) -> dict[str, Any]:
    """The ``simulate`` metrics of one replay (:func:`ctxpolicy.sim.metrics.trace_metrics`).

    ``source`` is a trace file (loaded and prepared once per process), its messages,
    or a :class:`~ctxpolicy.sim.prepared.PreparedTrace`. Without
    ``keep_series`` the per-call series are left out (they are large and ``tune``
    does not need them).
    """
    from ctxpolicy.sim.replay import replay_trace

    messages = _load_cached(source) if isinstance(source, str) else source
    result = replay_trace(messages, policy, window=window, trace=trace, label=label)
    result.prices = prices
    out = result.to_dict()
    if not keep_series:
        out.pop("series", None)
    return out


class ReplayMemo:
    """Metrics of the replays already run, by trace, policy and window.

    A replay is pure: the same trace under the same policy at the same window gives
    the same metrics (only the ``run`` label differs, and it is set on the way out),
    so a :class:`Replayer` asked for one it has run answers from here. The key is the
    trace's name in its replayer (one file, loaded once), a SHA-256 of the resolved
    policy's JSON (every field, so two policies share an entry only when they are
    equal) and the window. Bounded: at most ``maxsize`` entries, the least recently
    used dropped first. Entries are copies: callers cannot change them.
    """

    def __init__(self, maxsize: int = 2048) -> None:
        if maxsize < 0:
            raise ValueError("maxsize must be >= 0")
        self.maxsize = maxsize
        self._lru: Lru[tuple[str, str, int | None], dict[str, Any]] = Lru(maxsize)

    @property
    def hits(self) -> int:
        return self._lru.hits

    @property
    def misses(self) -> int:
        return self._lru.misses

    @staticmethod
    def policy_key(policy: Policy) -> str:
        """SHA-256 of the policy's JSON (the policy a replay gets, every field)."""
        return hashlib.sha256(policy.model_dump_json().encode("utf-8")).hexdigest()

    def get(self, key: tuple[str, str, int | None], run: str) -> dict[str, Any] | None:
        """A copy of the remembered metrics of ``key`` with ``run`` as its label, or None."""
        found = self._lru.get(key)
        return None if found is None else {**copy.deepcopy(found), "run": run}

    def put(self, key: tuple[str, str, int | None], metrics: Mapping[str, Any]) -> None:
        self._lru.put(key, copy.deepcopy(dict(metrics)))

    def __len__(self) -> int:
        return len(self._lru)


class Replayer:
    """Replays of a fixed set of traces, on local processes or a Dask cluster.

    ``Replayer(paths, workers=4)`` keeps a process pool for its lifetime (each
    worker loads and prepares a trace file the first time it replays it);
    ``Replayer(paths, cluster="tcp://host:8786")`` connects a ``dask.distributed``
    client and ships every prepared trace to the cluster once; with one worker, each
    trace is prepared (:func:`ctxpolicy.sim.prepared.prepare_trace`) the first time
    it is replayed. Replays already run are answered from ``memo``
    (:class:`ReplayMemo`, ``memo_size`` entries; 0 turns it off). Use as a context
    manager.
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        *,
        workers: int | None = None,
        cluster: str | None = None,
        prices: Mapping[str, Any] | None = None,
        memo_size: int = 2048,
    ) -> None:
        from ctxpolicy.sim.importers import load_trace

        self.paths = [str(p) for p in paths]
        self.names = [Path(p).name for p in self.paths]
        if len(set(self.names)) != len(self.names):
            self.names = [f"{i:03d}_{n}" for i, n in enumerate(self.names)]
        self.prices = prices
        self.workers = default_workers() if workers is None else max(1, workers)
        self.cluster = cluster
        # trace sizes (messages) schedule the longest replays first
        self._messages: dict[str, list[Message]] = {
            n: list(load_trace(p)) for n, p in zip(self.names, self.paths, strict=True)
        }
        self.sizes = {n: len(m) for n, m in self._messages.items()}
        self.memo = ReplayMemo(memo_size)
        self._prepared: dict[str, PreparedTrace] = {}
        self._client: Any = None
        self._executor: Executor | None = None
        self._sources: dict[str, Any] = dict(zip(self.names, self.paths, strict=True))
        if cluster is not None:
            try:
                from distributed import Client
            except ImportError as exc:
                raise RuntimeError(
                    f"--cluster needs dask.distributed: {extra_hint('dask')}"
                ) from exc
            self._client = Client(cluster, set_as_default=False)
            prepared = {n: self.prepared(n) for n in self.names}
            self._sources = self._client.scatter(prepared, broadcast=False)
        elif self.workers > 1:
            self._executor = _local_executor(self.workers)

    @property
    def where(self) -> str:
        """Where replays run, for reports."""
        if self._client is not None:
            n = len(self._client.scheduler_info().get("workers", {}))
            return f"dask cluster {self.cluster} ({n} workers)"
        return f"{self.workers} local process{'es' if self.workers > 1 else ''}"

    def messages(self, name: str) -> list[Message]:
        """The messages of trace ``name`` (as loaded in this process)."""
        return self._messages[name]

    def prepared(self, name: str) -> PreparedTrace:
        """Trace ``name`` prepared for replays in this process (once)."""
        found = self._prepared.get(name)
        if found is None:
            found = self._prepared[name] = prepare_trace(self._messages[name])
        return found

    def run(
        self,
        jobs: Sequence[tuple[str, Policy, int | None, str | None]],
        progress: Progress | None = None,
    ) -> list[dict[str, Any]]:
        """Metrics of each ``(trace name, policy, window, label)`` job, in job order.

        A job equal to one run before (same trace, policy and window; :class:`ReplayMemo`)
        or to an earlier job of this call is not replayed again: it gets a copy of
        those metrics under its own label. ``progress`` counts the replays run.
        """
        policy_keys: dict[int, str] = {}  # id(policy) -> its key, for this call

        def key(job: tuple[str, Policy, int | None, str | None]) -> tuple[str, str, int | None]:
            name, policy, window, _ = job
            pk = policy_keys.get(id(policy))
            if pk is None:
                pk = policy_keys[id(policy)] = ReplayMemo.policy_key(policy)
            return (name, pk, window)

        keys = [key(j) for j in jobs]
        out: list[dict[str, Any] | None] = [None] * len(jobs)
        todo: dict[tuple[str, str, int | None], int] = {}  # key -> first job with it
        for i, (k, job) in enumerate(zip(keys, jobs, strict=True)):
            if k in todo:
                continue
            out[i] = self.memo.get(k, _run_label(job))
            if out[i] is None:
                todo[k] = i
        ran = self._execute([jobs[i] for i in todo.values()], progress)
        fresh = dict(zip(todo, ran, strict=True))
        for k, metrics in fresh.items():
            self.memo.put(k, metrics)
        for i, (k, job) in enumerate(zip(keys, jobs, strict=True)):
            if out[i] is None:
                first = todo[k]
                out[i] = (
                    fresh[k] if first == i else {**copy.deepcopy(fresh[k]), "run": _run_label(job)}
                )
        return [o for o in out if o is not None]

    def _execute(
        self,
        jobs: Sequence[tuple[str, Policy, int | None, str | None]],
        progress: Progress | None = None,
    ) -> list[dict[str, Any]]:
        """Metrics of each job, replayed (in job order)."""
        total = len(jobs)
        out: list[dict[str, Any]] = [{} for _ in jobs]
        order = sorted(range(total), key=lambda i: -self.sizes[jobs[i][0]])

        def args(i: int) -> tuple[Any, ...]:
            name, policy, window, label = jobs[i]
            return (self._sources[name], policy, window, name, label, self.prices)

        if self._client is not None:
            futures = [self._client.submit(replay_metrics, *args(i), pure=False) for i in order]
            index = {f.key: i for f, i in zip(futures, order, strict=True)}
            from distributed import as_completed as dask_completed

            try:
                for done, fut in enumerate(
                    dask_completed(futures, loop=self._client.loop), start=1
                ):
                    i = index[fut.key]
                    out[i] = fut.result()
                    if progress is not None:
                        progress(done, total, jobs[i][0])
            except BaseException:
                self._client.cancel(futures)
                raise
            return out
        if self._executor is None:
            for done, i in enumerate(order, start=1):
                name, policy, window, label = jobs[i]
                out[i] = replay_metrics(
                    self.prepared(name), policy, window, name, label, self.prices
                )
                if progress is not None:
                    progress(done, total, name)
            return out
        local: dict[Future[dict[str, Any]], int] = {
            self._executor.submit(replay_metrics, *args(i)): i for i in order
        }
        try:
            for done, fut in enumerate(as_completed(local), start=1):
                i = local[fut]
                out[i] = fut.result()
                if progress is not None:
                    progress(done, total, jobs[i][0])
        except BaseException:
            for f in local:
                f.cancel()
            raise
        return out

    def close(self) -> None:
        """Shut the pool down / disconnect from the cluster."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_label(job: tuple[str, Policy, int | None, str | None]) -> str:
    """The ``run`` label a replay of ``job`` reports (as :class:`PolicyStrategy` sets it)."""
    _, policy, _, label = job
    return label or policy.agent
