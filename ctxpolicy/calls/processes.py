"""The engine in worker processes: conversations sticky to one of N processes.

Python threads share one interpreter lock: while one conversation prepares a long
history in a worker thread, every other conversation of the process (and the event
loop that serves it) waits for that lock at each step. :class:`EngineProcesses` runs
the sessions of a :class:`~ctxpolicy.calls.SessionPool` in ``processes`` worker
processes instead: a conversation lives in one of them, always the same (chosen by a
hash of its key), with its own sessions and its own handle on the state store. The
front end keeps calling a session as before, from a worker thread
(:func:`~ctxpolicy.calls.off_loop`); the session is a :class:`RemoteSession` that
sends the step (its arguments pickled) to the conversation's process and waits for
the answer without holding the interpreter lock. The prepared messages, the events
(handed to the pool's ``on_event`` / ``events_for`` in the caller's thread, in order,
when the step returns) and the stored state are those of the same session in a thread.

Each worker runs the steps it receives in a few threads of its own, so a short step of
one conversation is not queued behind a long one of another conversation on the same
process (they share that process's interpreter, as threads do today).

Failures: a worker process that dies fails the steps it was running with
:class:`EngineWorkerError` and is started again by the next step; its conversations
resume from the state store (a durable store loses nothing; with the ``memory`` store,
the state of that process's conversations is lost and they start afresh). Closing the
pool stops the processes (and a worker whose parent dies exits at once: it reads its
requests from a pipe the parent holds).

The worker is ``python -m ctxpolicy.calls._worker`` (the same interpreter, no
``multiprocessing`` start method, so nothing of the host's ``__main__`` is
re-imported); requests and answers are length-prefixed pickles on its standard input
and output, each at most :data:`MAX_FRAME_BYTES`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, BinaryIO

#: ``(agent, tenant, conversation)``, as :data:`ctxpolicy.calls.pool.Key`
Key = tuple[str, str, str]

__all__ = [
    "ENV",
    "MAX_FRAME_BYTES",
    "EngineProcesses",
    "EngineWorkerError",
    "RemoteSession",
    "engine_processes",
    "run_on",
]

#: The environment variable a host reads for its default number of engine processes
#: (``0``: the engine in threads of the host's own process).
ENV = "CTXPOLICY_ENGINE_PROCESSES"
#: The largest request or answer (pickled) between a front end and a worker process.
MAX_FRAME_BYTES = 1 << 30
#: A step of at least this many messages, or of this many characters of text, moves
#: its conversation to an engine process (``CTXPOLICY_ENGINE_HEAVY``:
#: ``"MESSAGES,CHARACTERS"``); smaller conversations run in the front end's own threads
#: (a step there costs no round trip to another process).
HEAVY_MESSAGES = 200
HEAVY_CHARS = 400_000
#: Threads of one worker process (steps of different conversations run side by side).
WORKER_THREADS = 4
_HEAD = struct.Struct("!Q")


class EngineWorkerError(RuntimeError):
    """An engine worker process failed (it died, or an answer could not travel back)."""


def _died(proc: subprocess.Popen[bytes], code: int | None) -> EngineWorkerError:
    """The error of a step whose engine process died, whether it went while the step
    was being sent to it or while it ran (``code``: its exit code, None when not yet
    known)."""
    how = "exited" if code is None else f"exited (code {code})"
    return EngineWorkerError(
        f"the engine process {proc.pid} {how} during this step; its conversations "
        "resume from their stored state at the next call (with the memory store, they "
        "start afresh)"
    )


def engine_processes(value: int | str | None = None) -> int:
    """The number of engine processes: ``value``, else :data:`ENV`, else 0 (threads).

    A value that is not a whole number ≥ 0 is refused with a clear error."""
    raw: Any = value if value is not None else os.environ.get(ENV, "0")
    try:
        n = int(str(raw).strip() or "0")
    except ValueError:
        raise ValueError(
            f"{ENV} must be a whole number of processes (0: threads), not {raw!r}"
        ) from None
    if n < 0 or n > 256:
        raise ValueError(f"engine processes must be between 0 and 256, not {n}")
    return n


def heavy_limits(value: str | None = None) -> tuple[int, int]:
    """``(messages, characters)`` from which a step is heavy: ``value`` or
    ``CTXPOLICY_ENGINE_HEAVY`` (``"200,400000"``), else the defaults; ``"0,0"`` sends
    every conversation to the engine processes."""
    raw = value if value is not None else os.environ.get("CTXPOLICY_ENGINE_HEAVY")
    if not raw:
        return HEAVY_MESSAGES, HEAVY_CHARS
    try:
        messages, chars = (int(part) for part in raw.split(","))
    except ValueError:
        raise ValueError(
            f"CTXPOLICY_ENGINE_HEAVY must be 'MESSAGES,CHARACTERS' (e.g. '200,400000'), not {raw!r}"
        ) from None
    return max(0, messages), max(0, chars)


def is_heavy(messages: Any, limits: tuple[int, int]) -> bool:
    """A step of at least ``limits`` messages or characters of text (string contents
    and the text parts of content lists; stops counting at the limit)."""
    most, chars = limits
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        return False
    if len(messages) >= most:
        return True
    total = 0
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            for part in content[:1000]:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    total += len(part["text"])
        if total >= chars:
            return True
    return False


# -- exceptions across the pipe ---------------------------------------------------------
class _ResponseImage:
    """What the engine reads of an HTTP response on an error: its JSON and its text."""

    def __init__(self, data: Any, has_json: bool, text: Any) -> None:
        self.data, self.has_json, self.text = data, has_json, text

    def json(self) -> Any:
        if not self.has_json:
            raise ValueError("no JSON body")
        return self.data


_ATTRS = ("code", "type", "message", "body", "detail")


def _plain(value: Any) -> Any:
    """``value`` if it survives pickling, else None."""
    try:
        pickle.dumps(value)
    except Exception:
        return None
    return value


def _image(exc: BaseException, depth: int = 0) -> dict[str, Any]:
    """What the engine reads of a provider error (``is_context_overflow``,
    ``parse_limit``, ``str``): class names, the text attributes, the response's JSON
    or text, the string, the chain (8 links at most, as the engine reads it)."""
    attrs: dict[str, Any] = {}
    for attr in _ATTRS:
        with contextlib.suppress(Exception):
            v = getattr(exc, attr, None)
            if isinstance(v, str | Mapping | list):
                attrs[attr] = _plain(v)
    response: tuple[Any, bool, str | None] | None = None
    resp = getattr(exc, "response", None)
    if resp is not None:
        try:
            response = (_plain(resp.json()), True, None)
        except Exception:
            text = None
            with contextlib.suppress(Exception):
                t = getattr(resp, "text", None)
                text = t if isinstance(t, str) else None
            response = (None, False, text)
    try:
        text = str(exc)
    except Exception:
        text = None
    link = exc.__cause__ or exc.__context__
    return {
        "names": [c.__name__ for c in type(exc).__mro__ if c not in (BaseException, object)],
        "attrs": attrs,
        "response": response,
        "str": text,
        "next": _image(link, depth + 1) if link is not None and depth < 7 else None,
    }


def _carried(image: dict[str, Any]) -> BaseException:
    """An exception the engine reads as it read the original (see :func:`_image`)."""
    base: type = Exception
    for name in reversed(image["names"]):
        if name in ("Exception", "BaseException"):
            continue
        base = type(name, (base,), {"__str__": _carried_str, "__module__": __name__})
    exc = base()
    for k, v in image["attrs"].items():
        with contextlib.suppress(Exception):
            setattr(exc, k, v)
    if image["response"] is not None:
        exc.response = _ResponseImage(*image["response"])
    exc._text = image["str"]
    if image["next"] is not None:
        exc.__cause__ = _carried(image["next"])
    return exc


def _carried_str(self: Any) -> str:
    text = getattr(self, "_text", None)
    if text is None:
        raise ValueError("the original error had no text")
    return str(text)


def error_out(exc: BaseException) -> tuple[str, Any]:
    """An exception raised by the engine, as it travels back."""
    from ctxpolicy.engine import ContextOverflowError

    if isinstance(exc, ContextOverflowError):
        return ("overflow", (str(exc), exc.attempts, exc.used, exc.limit))
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
    except Exception:
        return ("other", f"{type(exc).__name__}: {exc}")
    return ("pickled", data)


def _error_in(kind: str, data: Any) -> BaseException:
    if kind == "overflow":
        from ctxpolicy.engine import ContextOverflowError

        message, attempts, used, limit = data
        return ContextOverflowError(message, attempts=attempts, used=used, limit=limit)
    if kind == "pickled":
        exc: BaseException = pickle.loads(data)
        return exc
    return EngineWorkerError(f"in the engine process: {data}")


def sent(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(("\x00exc", _image(a)) if isinstance(a, BaseException) else a for a in args)


def received(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        _carried(a[1]) if isinstance(a, tuple) and len(a) == 2 and a[0] == "\x00exc" else a
        for a in args
    )


# -- framing ---------------------------------------------------------------------------
def write_frame(out: BinaryIO, lock: threading.Lock, payload: bytes) -> None:
    if len(payload) > MAX_FRAME_BYTES:
        raise ValueError(
            f"a request of {len(payload):,} bytes is over the {MAX_FRAME_BYTES:,}-byte limit "
            "between a front end and an engine process"
        )
    with lock:
        out.write(_HEAD.pack(len(payload)))
        out.write(payload)
        out.flush()


def read_frame(inp: BinaryIO) -> bytes | None:
    """One frame, or None at the end of the stream (the other side is gone)."""
    head = inp.read(_HEAD.size)
    if len(head) < _HEAD.size:
        return None
    (size,) = _HEAD.unpack(head)
    if size > MAX_FRAME_BYTES:
        raise EngineWorkerError(f"a frame of {size:,} bytes is over the limit")
    data = inp.read(size)
    return data if len(data) == size else None


# -- the worker process ----------------------------------------------------------------
def run_on(session: Any, fn: Callable[..., Any], /, *args: Any, weight: Any = None) -> Any:
    """``fn(session, *args)`` where the session lives: in this thread for a
    :class:`~ctxpolicy.Session`, in its process for a :class:`RemoteSession` (``fn`` is
    then a module-level function: it travels by name); ``weight`` (the step's messages)
    may first move a :class:`PlacedSession` there."""
    if isinstance(session, PlacedSession):
        return session.run(fn, *args, messages=weight)
    if isinstance(session, RemoteSession):
        return session.run(fn, *args)
    return fn(session, *args)


def _method(session: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return getattr(session, name)(*received(args), **kwargs)


def _recall(session: Any, name: str, arguments: Any) -> str:
    _, handler = session.recall_tool()
    result: str = handler(name, arguments)
    return result


def _recall_schemas(session: Any) -> Any:
    schemas, _ = session.recall_tool()
    return schemas


# -- the parent side -------------------------------------------------------------------
class _Process:
    """One worker process and the steps waiting for its answers."""

    def __init__(self, index: int, spec: bytes, deliver: Callable[[list[Any]], None]) -> None:
        self.index = index
        self.deliver = deliver
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.pending: dict[int, Future[Any]] = {}
        self.next_id = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.spec = spec
        self.starts = 0

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        here = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxpolicy.calls._worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            write_frame(proc.stdin, self.write_lock, self.spec)  # type: ignore[arg-type]
            ready = read_frame(proc.stdout)  # type: ignore[arg-type]
        except OSError:
            ready = None
        if ready is None:
            code = proc.wait(timeout=30)
            raise EngineWorkerError(
                f"an engine process could not start (exit code {code}; its error is above)"
            )
        self.starts += 1
        threading.Thread(
            target=self._read_answers, args=(proc,), name="ctxpolicy-engine-reader", daemon=True
        ).start()
        return proc

    def warm(self) -> None:
        """Start the process now if it is not running (a failure shows at the next step)."""
        with self.lock, contextlib.suppress(Exception):
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()

    def submit(self, op: str, key: Any, payload: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()
            proc = self.proc
            rid = self.next_id = self.next_id + 1
            self.pending[rid] = fut
        try:
            data = pickle.dumps((rid, op, key, payload), protocol=pickle.HIGHEST_PROTOCOL)
            assert proc.stdin is not None
            write_frame(proc.stdin, self.write_lock, data)  # type: ignore[arg-type]
        except BaseException as exc:
            with self.lock:
                self.pending.pop(rid, None)
            if isinstance(exc, OSError):  # it died before it had read the whole step
                raise _died(proc, proc.poll()) from None
            raise
        return fut

    def _read_answers(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        while True:
            try:
                frame = read_frame(proc.stdout)  # type: ignore[arg-type]
            except (OSError, ValueError, EngineWorkerError):
                frame = None
            if frame is None:
                break
            rid, result, events = pickle.loads(frame)
            with self.lock:
                fut = self.pending.pop(rid, None)
            if fut is not None:
                fut.set_result((result, events))
        code = proc.wait()
        with self.lock:
            if self.proc is proc:
                self.proc = None
            waiting, self.pending = self.pending, {}
        for fut in waiting.values():
            fut.set_exception(_died(proc, code))

    def stop(self, timeout: float = 10.0) -> None:
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(Exception):
            assert proc.stdin is not None
            write_frame(proc.stdin, self.write_lock, pickle.dumps((0, "stop", None, None)))  # type: ignore[arg-type]
            proc.stdin.close()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class EngineProcesses:
    """``n`` worker processes holding the sessions of one pool, by conversation.

    ``spec`` is what every worker builds its own :class:`~ctxpolicy.calls.SessionPool`
    from: the policies, ``max_sessions`` (per process), ``stored_id`` (a module-level
    function) and the session options (picklable: the pool's ``on_event`` and
    ``events_for`` stay here and get the events). Processes start on first use.
    """

    def __init__(
        self,
        n: int,
        spec: dict[str, Any],
        *,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        events_for: Callable[[str], Callable[[dict[str, Any]], None]] | None = None,
    ) -> None:
        if n < 1:
            raise ValueError("engine processes need at least one process")
        try:
            data = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.loads(data)
        except Exception as exc:
            raise ValueError(
                "the engine runs in other processes, so the policies, session options and "
                f"stored_id of the pool must be picklable (module-level functions): {exc}"
            ) from None
        self.on_event = on_event
        self.events_for = events_for
        self.procs = [_Process(i, data, self._deliver) for i in range(n)]
        self._closed = False

    def __len__(self) -> int:
        return len(self.procs)

    def start(self, *, wait: bool = False) -> None:
        """Start the processes now (each in a thread of its own: a process takes about
        a second to import the engine); ``wait`` until they are up. Without it they
        start at their first step."""
        threads = [
            threading.Thread(target=p.warm, name="ctxpolicy-engine-start", daemon=True)
            for p in self.procs
        ]
        for t in threads:
            t.start()
        if wait:
            for t in threads:
                t.join()

    def index(self, key: Key) -> int:
        """The process of a conversation: a stable hash of its key (the same in every
        run and every front end process)."""
        return zlib.crc32("\x1f".join(key).encode("utf-8", "surrogatepass")) % len(self.procs)

    def pids(self) -> list[int]:
        """The process ids of the running workers."""
        return [p.proc.pid for p in self.procs if p.proc is not None and p.proc.poll() is None]

    def _deliver(self, events: list[Any]) -> None:
        for agent, event in events:
            target = self.events_for(agent) if self.events_for is not None else self.on_event
            if target is not None:
                with contextlib.suppress(Exception):  # as a session's own emit does
                    target(event)

    def call(self, key: Key, private: bool, op: str, payload: Any) -> Any:
        """One step of a conversation in its process; blocks this thread (without the
        interpreter lock) until the answer, then hands the events on and returns."""
        if self._closed:
            raise EngineWorkerError("the engine processes are closed")
        proc = self.procs[self.index(key)]
        (kind, value), events = proc.submit(op, (*key, private), payload).result()
        self._deliver(events)
        if kind == "ok":
            return value
        raise _error_in(*value)

    def close(self) -> None:
        """Stop every worker (each closes its sessions and its store first)."""
        self._closed = True
        for p in self.procs:
            p.stop()


class RemoteSession:
    """A session that lives in an engine process: the calls a front end makes of a
    :class:`~ctxpolicy.Session` (``prepare``, ``on_error``, ``record_usage``,
    ``add_tool_result``, ``recall_tool``, ``recall``, ``close``) and :meth:`run` for
    anything else, each a blocking step (call it from a worker thread, never on an event
    loop: :func:`~ctxpolicy.calls.off_loop`)."""

    def __init__(
        self, processes: EngineProcesses, key: Key, *, private: bool = False, conv_id: str = ""
    ) -> None:
        self.processes = processes
        self.key = key
        self.private = private
        self.conv_id = conv_id

    def __repr__(self) -> str:
        return f"RemoteSession({self.key!r}, process {self.processes.index(self.key)})"

    def run(self, fn: Callable[..., Any], /, *args: Any) -> Any:
        """``fn(session, *args)`` in the session's process (``fn`` travels by name)."""
        return self.processes.call(self.key, self.private, "run", (fn, sent(args)))

    def _method(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.run(_method, name, sent(args), kwargs)

    def prepare(
        self, messages: Sequence[Mapping[str, Any]], tools: Any = None
    ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._method("prepare", list(messages), tools=tools)
        return result

    def on_error(
        self, error: Any, messages: Sequence[Mapping[str, Any]], tools: Any = None
    ) -> list[dict[str, Any]] | None:
        result: list[dict[str, Any]] | None = self._method("on_error", error, list(messages), tools)
        return result

    def record_usage(self, *args: Any, **kwargs: Any) -> Any:
        return self._method("record_usage", *args, **kwargs)

    def add_tool_result(self, *args: Any, **kwargs: Any) -> Any:
        return self._method("add_tool_result", *args, **kwargs)

    def recall(self, *args: Any, **kwargs: Any) -> Any:
        return self._method("recall", *args, **kwargs)

    def recall_tool(self) -> tuple[list[dict[str, Any]], Callable[[str, Any], str]]:
        schemas = self.run(_recall_schemas)

        def handler(name: str, arguments: Any) -> str:
            result: str = self.run(_recall, name, arguments)
            return result

        return schemas, handler

    def close(self) -> None:
        """Close the session in its process (its state is saved by each step)."""
        with contextlib.suppress(EngineWorkerError):
            self.processes.call(self.key, self.private, "drop", None)


class PlacedSession:
    """A conversation of a pool with engine processes: in this process (a
    :class:`~ctxpolicy.Session` in the caller's thread, no round trip) until a heavy
    step (:func:`is_heavy`), then in its engine process (a :class:`RemoteSession`) for
    as long as it is open.

    Moving closes the session here (every step has saved its state) and the engine
    process resumes it from the store, as any process does (the engine's state makes
    the prepared requests byte-identical). ``movable`` is False for a ``memory`` store,
    whose state cannot follow: such a conversation's first step decides where it runs
    (``fresh``: it has no state here yet), and it stays there.
    """

    def __init__(
        self,
        here: Callable[[], Any],
        remote: RemoteSession,
        *,
        movable: bool,
        fresh: bool,
        limits: tuple[int, int],
    ) -> None:
        self._here = here
        self.remote = remote
        self.local: Any = None
        self.moved = False
        self.movable = movable
        self.fresh = fresh
        self.limits = limits
        self.conv_id = remote.conv_id
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        where = "engine process" if self.moved else "here"
        return f"PlacedSession({self.remote.key!r}, {where})"

    def _target(self, messages: Any = None) -> Any:
        """Where the next step runs (a step with ``messages`` may move it first)."""
        with self._lock:
            if self.moved:
                return self.remote
            can_move = self.movable or (self.local is None and self.fresh)
            if messages is not None and can_move and is_heavy(messages, self.limits):
                if self.local is not None:
                    self.local.close()
                    self.local = None
                self.moved = True
                return self.remote
            if self.local is None:
                self.local = self._here()
            return self.local

    def run(self, fn: Callable[..., Any], /, *args: Any, messages: Any = None) -> Any:
        """``fn(session, *args)`` where the conversation runs (``messages``: the step's
        messages, which may move it)."""
        return run_on(self._target(messages), fn, *args)

    def prepare(
        self, messages: Sequence[Mapping[str, Any]], tools: Any = None
    ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._target(messages).prepare(messages, tools=tools)
        return result

    def on_error(
        self, error: Any, messages: Sequence[Mapping[str, Any]], tools: Any = None
    ) -> list[dict[str, Any]] | None:
        result: list[dict[str, Any]] | None = self._target(messages).on_error(
            error, messages, tools
        )
        return result

    def record_usage(self, *args: Any, **kwargs: Any) -> Any:
        return self._target().record_usage(*args, **kwargs)

    def add_tool_result(self, *args: Any, **kwargs: Any) -> Any:
        return self._target().add_tool_result(*args, **kwargs)

    def recall(self, *args: Any, **kwargs: Any) -> Any:
        return self._target().recall(*args, **kwargs)

    def recall_tool(self) -> tuple[list[dict[str, Any]], Callable[[str, Any], str]]:
        result: tuple[list[dict[str, Any]], Callable[[str, Any], str]] = (
            self._target().recall_tool()
        )
        return result

    def close(self) -> None:
        with self._lock:
            local, self.local = self.local, None
            moved = self.moved
        if local is not None:
            local.close()
        if moved:
            self.remote.close()
