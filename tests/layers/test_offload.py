from ctxpolicy.components import SnapshotRef
from ctxpolicy.conversation import check_units
from ctxpolicy.layers.offload import Offload, OffloadOptions
from tests.helpers_conv import Conv, make_ctx


class MemStore:
    def __init__(self, fail=False):
        self.docs = {}
        self.fail = fail

    def write(self, conv_id, step, action, document):
        if self.fail:
            raise OSError("disk full")
        name = f"step_{step:03d}_{action}"
        self.docs[name] = document
        return SnapshotRef(
            f"ctxsnap://{conv_id}/{name}", f"/s/{conv_id}/{name}.json", conv_id, name
        )


def conv(n=5):
    c = Conv().system("sys").user("task")
    for k in range(n):
        c.step(("read_file", {"path": f"src/f{k}.py"}, "x" * 300))
    return c.user("continue")


def test_offloads_and_points():
    units = conv().units()
    store = MemStore()
    ctx = make_ctx(units, target=0, snapshots=store)
    res = Offload(OffloadOptions(keep_recent_rounds=2)).apply(ctx, units)
    assert [u.kind for u in res.units] == ["system", "user", "summary", "step", "step", "user"]
    assert res.units[2].messages[0]["content"] == "\n".join(
        [
            "[Offloaded 3 earlier rounds to the snapshot store; search them with the recall tool]",
            "- step 0: read_file(path=src/f0.py) (src/f0.py) — ctxsnap://conv/step_000_offload",
            "- step 1: read_file(path=src/f1.py) (src/f1.py) — ctxsnap://conv/step_001_offload",
            "- step 2: read_file(path=src/f2.py) (src/f2.py) — ctxsnap://conv/step_002_offload",
        ]
    )
    assert sorted(store.docs) == ["step_000_offload", "step_001_offload", "step_002_offload"]
    assert store.docs["step_000_offload"]["messages"][1]["content"] == "x" * 300
    assert [u.round for u in res.dropped] == [0, 1, 2]
    assert check_units(units, res.units) == []
    # a second offload merges the pointer
    res2 = Offload(OffloadOptions(keep_recent_rounds=1)).apply(
        make_ctx(res.units, target=0, snapshots=store), res.units
    )
    assert [u.kind for u in res2.units] == ["system", "user", "summary", "step", "user"]
    text = res2.units[2].messages[0]["content"]
    assert text.startswith("[Offloaded 4 earlier rounds") and text.count("ctxsnap://") == 4


def test_no_store_and_failing_store():
    units = conv().units()
    res = Offload(OffloadOptions(keep_recent_rounds=2)).apply(make_ctx(units, target=0), units)
    assert [u.kind for u in res.units] == ["system", "user", "step", "step", "user"]
    assert res.report["store"] is None and "no snapshot store" in res.report["note"]
    bad = Offload(OffloadOptions(keep_recent_rounds=2)).apply(
        make_ctx(units, target=0, snapshots=MemStore(True)), units
    )
    assert bad.units == units and bad.report["failed"].startswith("snapshot write failed: OSError")
