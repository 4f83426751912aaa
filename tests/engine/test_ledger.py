from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.engine.ledger import ProgressLedger
from tests.helpers_conv import Conv, approx_text, ref_line


def dropped():
    return (
        Conv()
        .user("Please also check the booking ABC123")
        .step(
            (
                "read_file",
                {"path": "src/db/pool.py"},
                "max_connections=10\n" + ref_line("c", 0, "read_file"),
            ),
            text="Checking the pool config",
        )
        .step(
            ("run_tests", {}, "ValueError: pool exhausted"),
            text="Next: raise max_connections to 50",
        )
        .units(pin_first_user=False, pin_last_user=False)
    )


def test_exact_render_and_unit():
    assert ProgressLedger().render() is None and ProgressLedger().unit() is None
    led = ProgressLedger(constraints=["Never restart prod"])
    assert led.render().endswith("Constraints (verbatim):\n- Never restart prod")
    led.set_goal("Fix the connection pool")
    led.update(dropped())
    assert led.render() == "\n".join(
        [
            "[Progress ledger: facts from compacted history — full details in snapshots]",
            "Goal: Fix the connection pool",
            "Constraints (verbatim):",
            "- Never restart prod",
            "Done:",
            "- step 0: read_file(path=src/db/pool.py) → max_connections=10 [ctxsnap://c/step_000_read_file]",
            "- step 1: run_tests() → ValueError: pool exhausted",
            "Files: src/db/pool.py",
            "Identifiers: ABC123, max_connections=10",
            "Errors:",
            "- ValueError: pool exhausted",
            "Next step: Next: raise max_connections to 50",
        ]
    )
    u = led.unit()
    assert u.kind == "ledger" and u.pinned and u.key == "ledger"
    assert u.messages[0]["content"] == led.render()


def test_bounded_never_drops_constraints_and_round_trip():
    led = ProgressLedger(
        max_tokens=80, constraints=["C1 keep me", "C2 keep me too"], count_text=approx_text
    )
    for k in range(50):
        led.update(Conv().step(("bash", {"cmd": f"make t{k}"}, f"/tmp/out{k}.log written")).units())
    text = led.render()
    assert approx_text(text) <= 80
    assert "C1 keep me" in text and "C2 keep me too" in text
    assert "make t49" in text and "make t0" not in text
    again = ProgressLedger.from_dict(led.to_dict(), count_text=approx_text)
    assert again.render() == text and again.to_dict() == led.to_dict()


def test_record_facts_files_and_ids_and_a_smaller_bound_on_render() -> None:
    led = ProgressLedger(max_tokens=2000)
    led.record_facts(["src/app.py", "HAT028", "max_connections=10", "src/app.py"])
    assert led.files == ["src/app.py"]
    assert led.ids == ["HAT028", "max_connections=10"]
    led.record_facts([f"ORDER-{i:04d}" for i in range(300)])
    full = led.render()
    small = led.render(max_tokens=40)
    assert full is not None and small is not None
    assert "ORDER-0299" in full and len(small) < len(full) / 10
    assert led.render() == full  # the configured bound is unchanged


# --------------------------------------------------------------------------- newest-first update


def _forward_update(led: ProgressLedger, dropped_units) -> None:
    """The plain definition of :meth:`ProgressLedger.update`: every entry of every unit added
    in conversation order (an entry seen again moves to the end; a list keeps its
    newest ``_MAX_PER_LIST``)."""
    from ctxpolicy.engine import ledger as mod

    def add(name: str, item: str) -> None:
        lst = getattr(led, name)
        item = item.strip()
        if not item:
            return
        if item in lst:
            lst.remove(item)
        lst.append(item)
        if len(lst) > mod._MAX_PER_LIST:
            del lst[0]

    for u in dropped_units:
        if u.kind == "ledger":
            continue
        for m in u.messages:
            text = mod.content_text(m.get("content"))
            if m.get("role") == "user" and led.goal is None and u.kind == "user" and text.strip():
                led.goal = mod.short(text, 300)
            if m.get("role") == "assistant" and text.strip():
                led.next_step = mod.short(text, 300)
        for name, item in mod._entries(u, set(mod._LISTS)):
            add(name, item)


def _many_units(n: int, seed: int, vocabulary: int):
    import random

    rng = random.Random(seed)
    c = Conv().user(f"goal {seed}")
    for k in range(n):
        f = rng.randrange(vocabulary)
        out = rng.choice(
            [
                f"src/mod_{f}.py ok",
                f"ValueError: bad id ORD_{f:04d}",
                f"commit {f:07x}a1 max_workers={f}",
                "same output",
                "",
            ]
        )
        if rng.random() < 0.2:
            c.user(f"also look at docs/page_{f}.md")
        c.step(("bash", {"cmd": f"cat file_{f}.txt"}, out), text=rng.choice([None, f"step {k}"]))
    return c.units(pin_first_user=False, pin_last_user=False)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 500),
    seed=st.integers(0, 10_000),
    vocabulary=st.sampled_from([3, 50, 400]),
    split=st.integers(0, 500),
    preload=st.integers(0, 200),
)
def test_update_newest_first_is_the_plain_definition(n, seed, vocabulary, split, preload) -> None:
    units = _many_units(n, seed, vocabulary)
    fast, plain = ProgressLedger(), ProgressLedger()
    for led in (fast, plain):  # a ledger with entries already, up to full lists
        led.files = [f"old/{i}.py" for i in range(preload)]
        led.ids = ["ORD_0001", *(f"X{i}" for i in range(preload // 2))]
    # in two drops, as compactions come
    fast.update(units[:split])
    fast.update(units[split:])
    _forward_update(plain, units[:split])
    _forward_update(plain, units[split:])
    assert fast.to_dict() == plain.to_dict()


def test_update_reads_only_the_newest_part_of_a_large_drop(monkeypatch) -> None:
    from ctxpolicy.engine import ledger as mod

    calls = []
    real = mod._entries
    monkeypatch.setattr(mod, "_entries", lambda u, need: calls.append(u) or real(u, need))
    units = _many_units(3000, 1, 100_000)  # distinct files, ids, errors: every list fills up
    led = ProgressLedger()
    led.update(units)
    read = len(calls)
    plain = ProgressLedger()
    _forward_update(plain, units)
    assert led.to_dict() == plain.to_dict()
    assert read < len(units) / 2


def test_a_loaded_ledger_keeps_the_newest_entries_of_each_list() -> None:
    data = ProgressLedger().to_dict() | {"files": [f"f{i}.py" for i in range(260)]}
    led = ProgressLedger.from_dict(data)
    assert led.files == [f"f{i}.py" for i in range(60, 260)]


def test_a_huge_drop_is_read_up_to_max_read_units() -> None:
    from ctxpolicy.engine import ledger as mod

    # ids that never fill the list (one every 40 units): only the newest MAX_READ count
    c = Conv()
    for k in range(mod.MAX_READ + 400):
        c.step(("bash", {"cmd": "true"}, f"ticket ORD_{k:05d}" if k % 40 == 0 else "ok"))
    units = c.units(pin_first_user=False, pin_last_user=False)
    led = ProgressLedger()
    led.update(units)
    plain = ProgressLedger()
    _forward_update(plain, units[-mod.MAX_READ :])
    assert led.ids == plain.ids and "ORD_00000" not in led.ids
    assert led.next_step == plain.next_step and led.done == plain.done


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 200),
    limit=st.integers(0, 3000),
    width=st.integers(1, 60),
    constraints=st.lists(st.text(min_size=1, max_size=30), max_size=3),
)
def test_render_fits_the_bound_with_one_exact_check(n, limit, width, constraints) -> None:
    """Trimming planned on an estimate still ends within the bound, by an exact count,
    unless only what is never trimmed is left."""
    counted = []

    def count(text: str) -> int:
        counted.append(text)
        return approx_text(text) + text.count("/")  # not len/4: the estimate is off

    led = ProgressLedger(limit, constraints, count_text=count)
    led.archive = "ctxsnap://c/history"
    for i in range(n):
        led.done.append(f"step {i}: " + "x/" * width)
        led.files.append(f"src/m_{i}.py")
        led.ids.append(f"ID{i:05d}")
    led.goal = "goal " * 30
    text = led.render()
    assert text is not None and led.archive in text
    assert all(c.strip() in text for c in constraints)
    if count(text) > limit:  # nothing trimmable is left
        assert "Done:" not in text and "Files:" not in text and "Identifiers:" not in text
    assert len(counted) <= 6  # a few exact counts, not one per entry
