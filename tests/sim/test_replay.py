"""ctxpolicy.sim.replay: what is recoverable behind references, recalled only as needed."""

from __future__ import annotations

from ctxpolicy.sim.replay import _Recoverable, _recoverable_texts


class Recalls:
    """A strategy's ``recall``: fixed texts per reference, every call logged."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts
        self.calls: list[str] = []

    def recall(self, ref: str) -> str | None:
        self.calls.append(ref)
        return self.texts.get(ref)


CTX = "see ctxsnap://c/a and ctxsnap://c/b"
TEXTS = {
    "ctxsnap://c/a": "alpha /srv/a.py",
    "ctxsnap://c/b": "beta, archived: ctxsnap://c/deep",
    "ctxsnap://c/deep": "deep_value 4242",
}


def test_two_hops_in_order():
    s = Recalls(TEXTS)
    assert list(_recoverable_texts(CTX, s)) == [TEXTS[r] for r in TEXTS]  # type: ignore[arg-type]
    assert s.calls == list(TEXTS)


def test_membership_reads_only_as_far_as_needed_and_equals_the_joined_text():
    joined = "\n".join(TEXTS.values())
    for fact, calls in (
        ("/srv/a.py", 1),
        ("beta", 2),
        ("deep_value", 3),
        ("missing_fact", 3),
    ):
        s = Recalls(TEXTS)
        rec = _Recoverable(_recoverable_texts(CTX, s))  # type: ignore[arg-type]
        assert (fact in rec) is (fact in joined)
        assert len(s.calls) == calls
        # asking again or for an earlier fact recalls nothing more
        assert ("alpha" in rec) and len(s.calls) == calls
    s = Recalls(TEXTS)
    rec = _Recoverable(_recoverable_texts(CTX, s))  # type: ignore[arg-type]
    assert ("a.py\nbeta" in rec) is ("a.py\nbeta" in joined)  # across texts: the joined text
