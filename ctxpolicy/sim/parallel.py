"""Parallel replays: on local worker processes or on a Dask cluster.

Replays are pure (same trace, policy and window → same metrics), so they can run
anywhere and in any order; every function here returns results **in submission
order**, whatever the number of workers, which keeps ``simulate`` and ``tune``
deterministic regardless of ``--workers`` or ``--cluster``.

* :func:`default_workers` — the CPUs this process may use (``--workers`` default);
* :func:`map_ordered` — ``[fn(*a) for a in args]`` on a local process pool;
* :class:`Replayer` — replays of a fixed set of traces under many policies, on a
  persistent local pool (traces loaded once per worker process) or on a
  ``dask.distributed`` cluster (traces shipped to the workers once with
  ``Client.scatter``, results gathered).

Worker processes ignore SIGINT: Ctrl-C reaches the parent only, which decides what
to keep (``tune`` writes the best so far) and then shuts the pool down.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxpolicy._install import extra_hint

if TYPE_CHECKING:
    from ctxpolicy.policy.models import Policy

__all__ = ["Progress", "Replayer", "default_workers", "map_ordered", "replay_metrics"]

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
def _load_cached(path: str) -> list[Message]:
    from ctxpolicy.sim.importers import load_trace

    return list(load_trace(path))


def replay_metrics(
    source: str | Sequence[Mapping[str, Any]],
    policy: Policy,
    window: int | None,
    trace: str,
    label: str | None = None,
    prices: Mapping[str, Any] | None = None,
    keep_series: bool = False,
) -> dict[str, Any]:
    """The ``simulate`` metrics of one replay (:func:`ctxpolicy.sim.metrics.trace_metrics`).

    ``source`` is a trace file (loaded once per process) or its messages. Without
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


class Replayer:
    """Replays of a fixed set of traces, on local processes or a Dask cluster.

    ``Replayer(paths, workers=4)`` keeps a process pool for its lifetime (each
    worker loads a trace file the first time it replays it); ``Replayer(paths,
    cluster="tcp://host:8786")`` connects a ``dask.distributed`` client and ships
    every trace to the cluster once. Use as a context manager.
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        *,
        workers: int | None = None,
        cluster: str | None = None,
        prices: Mapping[str, Any] | None = None,
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
            self._sources = self._client.scatter(self._messages, broadcast=False)
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

    def run(
        self,
        jobs: Sequence[tuple[str, Policy, int | None, str | None]],
        progress: Progress | None = None,
    ) -> list[dict[str, Any]]:
        """Metrics of each ``(trace name, policy, window, label)`` job, in job order."""
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
                    self._messages[name], policy, window, name, label, self.prices
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
