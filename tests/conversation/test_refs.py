"""The reference line has one home: what ``ref_line`` writes, ``REF_LINE`` reads back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxpolicy.conversation.cut import truncate_keep_refs
from ctxpolicy.conversation.refs import REF_LINE, ref_line, split_refs

PATHS = (
    st.text(
        alphabet=st.characters(whitelist_categories=("L", "N"), whitelist_characters="/._-~ "),
        min_size=1,
        max_size=80,
    )
    .map(str.strip)
    .filter(bool)
)
URIS = st.from_regex(r"ctxsnap://[a-z0-9]{1,12}/[a-z0-9_.-]{1,20}", fullmatch=True)


@given(PATHS, st.one_of(st.none(), URIS), st.text(max_size=200))
def test_written_lines_are_read_back(path: str, uri: str | None, body: str) -> None:
    ref = f"{path} ({uri})" if uri else path
    line = ref_line(ref)
    assert line == f"[Full detail available at: {ref}]"
    m = REF_LINE.search(line)
    assert m is not None and m.group("path") == path and m.group("uri") == uri
    body = body.replace("[Full detail", "").rstrip("\n")
    kept, refs = split_refs(f"{body}\n{line}")
    assert refs == [line] and kept == body


def test_cutting_keeps_the_reference_line() -> None:
    line = ref_line("snap/a.txt (ctxsnap://c1/a.txt)")
    out = truncate_keep_refs("x" * 5000 + "\n" + line, 300)
    assert out is not None and out.endswith("\n" + line) and "chars elided" in out
