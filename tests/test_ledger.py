from ctxpolicy.ledger import Ledger
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
    assert Ledger().render() is None and Ledger().unit() is None
    led = Ledger(constraints=["Never restart prod"])
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
    led = Ledger(
        max_tokens=80, constraints=["C1 keep me", "C2 keep me too"], count_text=approx_text
    )
    for k in range(50):
        led.update(Conv().step(("bash", {"cmd": f"make t{k}"}, f"/tmp/out{k}.log written")).units())
    text = led.render()
    assert approx_text(text) <= 80
    assert "C1 keep me" in text and "C2 keep me too" in text
    assert "make t49" in text and "make t0" not in text
    again = Ledger.from_dict(led.to_dict(), count_text=approx_text)
    assert again.render() == text and again.to_dict() == led.to_dict()


def test_record_facts_files_and_ids_and_a_smaller_bound_on_render() -> None:
    led = Ledger(max_tokens=2000)
    led.record_facts(["src/app.py", "HAT028", "max_connections=10", "src/app.py"])
    assert led.files == ["src/app.py"]
    assert led.ids == ["HAT028", "max_connections=10"]
    led.record_facts([f"ORDER-{i:04d}" for i in range(300)])
    full = led.render()
    small = led.render(max_tokens=40)
    assert full is not None and small is not None
    assert "ORDER-0299" in full and len(small) < len(full) / 10
    assert led.render() == full  # the configured bound is unchanged
