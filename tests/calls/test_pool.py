"""The one session pool: keys, LRU eviction (closing), one shared store with bounded
connections (real sqlite files, a real PostgreSQL server)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxpolicy.calls import SessionPool, conversation_key
from ctxpolicy.engine import Session
from ctxpolicy.policy.models import Policy
from tests.integrations.conftest import big_output, make_policy


def with_state(policy: Policy, store: str, **options: Any) -> Policy:
    state = policy.state.model_copy(update={"store": store, "options": options})
    return policy.model_copy(update={"state": state})


def history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Fix BUG-1234."}]
    for i in range(n):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": big_output(i, 40)})
    return out


names = st.text(st.sampled_from("abAB09_.-"), min_size=1, max_size=6)
ids = st.text(min_size=1, max_size=8)


@given(
    names,
    st.text(st.sampled_from("ab@:9"), max_size=4),
    ids,
    names,
    st.text(st.sampled_from("ab@:9"), max_size=4),
    ids,
)
def test_conversation_keys_are_injective(
    a1: str, t1: str, c1: str, a2: str, t2: str, c2: str
) -> None:
    same = conversation_key(a1, c1, t1) == conversation_key(a2, c2, t2)
    assert same == ((a1, t1, c1) == (a2, t2, c2))


def test_keys_without_a_tenant_are_the_adapters_keys() -> None:
    assert conversation_key("coder", "thread-1") == "coder/thread-1"
    assert conversation_key("coder", "thread-1", "t9") == "coder@t9/thread-1"
    with pytest.raises(ValueError):
        conversation_key("a/b", "c")
    with pytest.raises(ValueError):
        conversation_key("a", "")


def test_agents_and_tenants_never_share_a_session(tmp_path: Path) -> None:
    a = make_policy(tmp_path)
    b = a.model_copy(update={"agent": "other"})
    pool = SessionPool({"test_agent": a, "other": b})
    s1 = pool.get("conv", agent="test_agent")
    assert pool.get("conv", agent="test_agent") is s1
    s2 = pool.get("conv", agent="other")
    s3 = pool.get("conv", agent="test_agent", tenant="t1")
    assert len({id(s1), id(s2), id(s3)}) == 3
    assert [s.conv_id for s in (s1, s2, s3)] == [
        "test_agent/conv",
        "other/conv",
        "test_agent@t1/conv",
    ]
    with pytest.raises(KeyError):
        pool.get("conv", agent="nobody")
    pool.close()


def test_least_recently_used_sessions_are_closed_and_resume(tmp_path: Path) -> None:
    pool = SessionPool(make_policy(tmp_path), max_sessions=2)
    closed: list[str] = []
    pool.on_close = lambda s: closed.append(s.conv_id)
    first = pool.get("a")
    first.prepare(history(6))
    version = first.state.to_entries()
    pool.get("b")
    pool.get("a")  # a is the most recent now
    pool.get("c")  # evicts b
    assert closed == ["test_agent/b"]
    assert pool.conversations() == ["a", "c"]
    pool.get("b")  # evicts a, which resumes from the store when it comes back
    back = pool.get("a")
    assert back is not first and back.state.to_entries() == version
    pool.close()
    assert len(pool) == 0


def test_a_memory_store_is_bounded_by_the_pool(tmp_path: Path) -> None:
    """The pool's shared ``memory`` store keeps the open conversations and the
    ``max_sessions`` most recently evicted ones (it grew with every conversation ever
    opened); older ones are dropped and counted in ``released``."""
    from ctxpolicy.state.memory import MemoryStateStore

    pool = SessionPool(with_state(make_policy(tmp_path), "memory"), max_sessions=3)
    for i in range(20):
        s = pool.get(f"c{i}")
        s.prepare(history(1))
        s.record_usage(1000)
    store = pool.state_store()
    assert isinstance(store, MemoryStateStore)
    assert len(store) == 6  # c17-c19 open, c14-c16 evicted lately
    assert pool.released == 14
    assert pool.get("c19").state.usage_seen  # open: its state is where it was
    back = pool.get("c0")  # long evicted: nothing of it is left in memory
    assert not back.state.usage_seen
    back.prepare(history(1))
    back.record_usage(1000)  # versions never repeat: its new commits are accepted
    assert back.state.usage_seen
    assert pool.get("c16").state.usage_seen  # evicted lately: resumed from memory
    assert len(store) <= 6
    pool.close()


def test_a_given_store_is_the_callers(tmp_path: Path) -> None:
    """A store handed to the pool (``state_store=``) is not trimmed by it."""
    from ctxpolicy.state.memory import MemoryStateStore

    store = MemoryStateStore()
    pool = SessionPool(make_policy(tmp_path), max_sessions=2, state_store=store)
    for i in range(5):
        pool.get(f"c{i}").record_usage(1000)
    assert len(store) == 5 and pool.released == 0
    pool.close()


def test_threads_opening_one_conversation_get_one_session(tmp_path: Path) -> None:
    pool = SessionPool(make_policy(tmp_path))
    barrier = threading.Barrier(8)

    def open_it(_: int) -> Session:
        barrier.wait()
        return pool.get("same")

    with ThreadPoolExecutor(8) as ex:
        sessions = list(ex.map(open_it, range(8)))
    assert len({id(s) for s in sessions}) == 1
    pool.close()


def test_private_conversations_are_never_stored(tmp_path: Path) -> None:
    pool = SessionPool(make_policy(tmp_path))
    p = pool.private("run-1")
    assert pool.private("run-1") is p and pool.private("run-2") is not p
    assert p.conv_id not in ("run-1", "test_agent/run-1")
    pool.close()


def _fds(name: str) -> int:
    """Open descriptors of this process on files whose name starts with ``name`` (the
    snapshot segments a prepare writes are another bounded pool: segments.MAX_OPEN)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(name)
        except OSError:
            continue
    return found


def test_sqlite_sessions_share_one_connection(tmp_path: Path) -> None:
    policy = with_state(make_policy(tmp_path), "sqlite", path=str(tmp_path / "state.db"))
    pool = SessionPool(policy)
    pool.get("warm").prepare(history(1))
    before = _fds("state.db")
    for i in range(40):
        pool.get(f"conv-{i}").prepare(history(1))
    store = pool.state_store()
    assert store is not None and store.connections == 1  # type: ignore[attr-defined]
    assert _fds("state.db") - before < 5  # was two descriptors per conversation
    pool.close()


def _server_connections(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ctxpolicy'"
        ).fetchone()
    return int(row[0]) if row else 0


def test_postgres_conversations_share_a_bounded_pool(tmp_path: Path, postgres_server: Any) -> None:
    """60 open conversations, pool size 8: at most 8 server connections, none of them
    silently in memory (was one connection each: 10 of 60 ran in memory)."""
    pytest.importorskip("psycopg")
    events: list[dict[str, Any]] = []
    policy = with_state(
        make_policy(tmp_path), "postgres", dsn=postgres_server.dsn, table="pool_t", pool_size=8
    )
    # the server is shared by the run's other PostgreSQL tests: count above what is open
    base = _server_connections(postgres_server.dsn)
    pool = SessionPool(policy, max_sessions=4096, on_event=events.append)
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _server_connections(postgres_server.dsn) - base)
            stop.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:

        def converse(i: int) -> int:
            s = pool.get(f"conv-{i}")
            s.prepare(history(2))
            s.record_usage(1000)
            return s.state_version if hasattr(s, "state_version") else 0

        with ThreadPoolExecutor(12) as ex:
            list(ex.map(converse, range(60)))
    finally:
        stop.set()
        watcher.join()
    assert len(pool) == 60
    assert not [e for e in events if e.get("type") == "state.unavailable"]
    assert all(s.internals.persistence is not None for s in pool.sessions())  # every one is stored
    assert peak[0] <= 8
    assert _server_connections(postgres_server.dsn) - base <= 8
    # each conversation's state is in the database: a new pool resumes it
    pool.close()
    # the server lists a closed connection until its backend has exited: wait for it
    deadline = time.monotonic() + 10
    while _server_connections(postgres_server.dsn) > base and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _server_connections(postgres_server.dsn) <= base
    again = SessionPool(policy)
    resumed = again.get("conv-59")
    assert resumed.state.usage_seen
    again.close()


def test_a_store_that_cannot_open_is_reported_and_tried_again(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    events: list[dict[str, Any]] = []
    policy = with_state(
        make_policy(tmp_path),
        "postgres",
        dsn=f"postgresql://u:secret-pw@127.0.0.1:{port}/db",
        connect_timeout_s=1,
    )
    pool = SessionPool(policy, on_event=events.append)
    s1 = pool.get("a")
    s1.prepare(history(1))  # works, in memory, and says so
    unavailable = [e for e in events if e.get("type") == "state.unavailable"]
    assert len(unavailable) == 1 and "secret-pw" not in str(unavailable)
    assert pool.state_store() is None  # not cached: the next session tries again
    pool.get("b")
    assert len([e for e in events if e.get("type") == "state.unavailable"]) == 2
    pool.close()


def test_the_gateway_pool_shares_the_bounded_connections(
    tmp_path: Path, postgres_server: Any
) -> None:
    """``ctxpolicy serve``'s sessions (gateway.sessions) go through the same pool."""
    pytest.importorskip("psycopg")
    pytest.importorskip("starlette")
    from ctxpolicy.gateway.sessions import SessionPool as GatewayPool

    policy = with_state(
        make_policy(tmp_path), "postgres", dsn=postgres_server.dsn, table="gw_t", pool_size=3
    )
    pool = GatewayPool({"test_agent": policy})
    with ThreadPoolExecutor(6) as ex:
        list(ex.map(lambda i: pool.get("test_agent", f"gw-{i}").prepare(history(1)), range(30)))
    assert len(pool.open_sessions) == 30
    assert all(s.internals.persistence is not None for s in pool.open_sessions.values())
    assert _server_connections(postgres_server.dsn) <= 3
    assert pool.get("test_agent", "gw-1").conv_id == "gw-1"  # the gateway's ids as they are
    pool.close()


def test_a_conversation_in_a_call_is_never_evicted(tmp_path: Path) -> None:
    """With ``max_sessions=1``, other conversations' whole calls run while one
    conversation is in the middle of its call (its lock held, waiting for the
    provider): its session is neither closed nor dropped; the pool is over capacity
    until that call ends, and the next conversation opened trims it back."""
    import asyncio

    from ctxpolicy.calls import CallDriver
    from ctxpolicy.calls.driver import UsageOnly

    pool = SessionPool(with_state(make_policy(tmp_path), "memory"), max_sessions=1)
    closed: list[str] = []
    pool.on_close = lambda s: closed.append(s.conv_id)

    async def main() -> None:
        in_send, go_on = asyncio.Event(), asyncio.Event()

        async def call(conv: str, hold: bool = False) -> Session:
            async with pool.lock(conv):
                driver = CallDriver(
                    None, open=lambda: pool.get(conv), format=UsageOnly(lambda r: r)
                )

                async def send(prepared: list[dict[str, Any]]) -> int:
                    if hold:
                        in_send.set()
                        await go_on.wait()
                    return 1000

                await driver.acall(history(2), None, send)
                return driver.session

        held = asyncio.create_task(call("a", hold=True))
        await in_send.wait()
        for other in ("b", "c", "d"):  # each opens a session past max_sessions
            await asyncio.gather(call(other), call(other + "2"))
        assert "test_agent/a" not in closed
        assert "a" in pool.conversations()
        go_on.set()
        a = await held
        assert a.state.usage_seen  # its usage was recorded on its open session
        assert "test_agent/a" not in closed and pool.released < 7
        await call("e")  # a's call is over: trimmed back to max_sessions
        assert pool.conversations() == ["e"] and "test_agent/a" in closed
        back = await call("a")  # evicted lately: resumed from the memory store
        assert back is not a and back.state.usage_seen

    asyncio.run(main())
    pool.close()


def test_a_conversation_a_thread_is_using_is_never_evicted(tmp_path: Path) -> None:
    """The same for a thread's step (``using``: an engine process's worker threads)."""
    pool = SessionPool(make_policy(tmp_path), max_sessions=1)
    closed: list[str] = []
    pool.on_close = lambda s: closed.append(s.conv_id)
    inside, done = threading.Event(), threading.Event()

    def step() -> None:
        with pool.using("a"):
            s = pool.get("a")
            inside.set()
            done.wait(30)
            s.prepare(history(2))

    t = threading.Thread(target=step)
    t.start()
    inside.wait(30)
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(lambda c: pool.get(c).prepare(history(1)), ["b", "c", "d", "e"]))
    assert "test_agent/a" not in closed and "a" in pool.conversations()
    done.set()
    t.join(30)
    pool.get("f")
    assert pool.conversations() == ["f"] and "test_agent/a" in closed
    pool.close()


def test_a_lock_handed_to_a_waiting_call_is_kept(tmp_path: Path) -> None:
    """Released to a call waiting for it that has not run yet, a conversation's lock is
    still in use: an eviction meanwhile neither closes the session nor drops the lock
    (a later call would otherwise get a new lock and run beside the waiting one)."""
    import asyncio

    pool = SessionPool(make_policy(tmp_path), max_sessions=1)

    async def main() -> None:
        lk = pool.lock("a")
        a = pool.get("a")
        await lk.acquire()
        waiting = asyncio.ensure_future(lk.acquire())
        await asyncio.sleep(0)
        lk.release()  # handed to the waiting call, which has not run yet
        pool.get("b")
        assert pool.lock("a") is lk and pool.peek("a") is a
        await waiting
        lk.release()

    asyncio.run(main())
    pool.close()


@pytest.mark.parametrize("private", [False, True], ids=["stored", "private"])
def test_held_hands_out_the_pools_session_in_use_for_the_block(
    tmp_path: Path, private: bool
) -> None:
    """``held`` is ``get`` (or ``private``) inside ``using``: the session the block gets
    is the pool's, and other threads opening conversations meanwhile never evict it."""
    pool = SessionPool(with_state(make_policy(tmp_path), "memory"), max_sessions=1)
    closed: list[str] = []
    pool.on_close = lambda s: closed.append(s.conv_id)
    with pool.held("a", private=private) as s:
        assert s is (pool.private("a") if private else pool.peek("a"))
        s.prepare(history(2))
        with ThreadPoolExecutor(2) as ex:
            list(ex.map(lambda c: pool.get(c).prepare(history(1)), ["b", "c", "d"]))
        assert s.conv_id not in closed
        s.prepare(history(3))
        assert s.stats.prepares == 2  # its state went on where it was
    pool.get("e")  # the block is over: trimmed back to max_sessions
    assert s.conv_id in closed and pool.conversations() == ["e"]
    pool.close()


def test_aheld_holds_across_awaits_and_opens_off_the_loop(tmp_path: Path) -> None:
    """``aheld`` opens the session in a worker thread and keeps it in use across the
    block's awaits (a model call): other threads' conversations never evict it."""
    import asyncio

    pool = SessionPool(make_policy(tmp_path), max_sessions=1)
    closed: list[str] = []
    pool.on_close = lambda s: closed.append(s.conv_id)
    opened_in: list[int] = []
    get = pool.get

    def recording_get(*args: Any, **kw: Any) -> Session:
        opened_in.append(threading.get_ident())
        return get(*args, **kw)

    pool.get = recording_get  # type: ignore[method-assign]

    async def main() -> None:
        loop_thread = threading.get_ident()
        async with pool.aheld("a") as s:
            await asyncio.to_thread(lambda: [get(c) for c in ("b", "c", "d")])
            assert "test_agent/a" not in closed and pool.peek("a") is s
        assert opened_in and loop_thread not in opened_in

    asyncio.run(main())
    get("e")
    assert "test_agent/a" in closed
    pool.close()
