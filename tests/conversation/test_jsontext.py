import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation.jsontext import dumps_bytes, fast_dumps, to_json
from tests.strategies import JSON_SCALARS, nested

_VALUE = nested(JSON_SCALARS, st.text(max_size=5), max_leaves=20)


class _Odd:
    def __str__(self) -> str:
        return "odd"


@settings(max_examples=300, deadline=None)
@given(_VALUE)
def test_fast_dumps_writes_what_json_dumps_writes(value: object) -> None:
    for options in ({}, {"sort_keys": True}, {"separators": (",", ":")}):
        assert fast_dumps(**options)(value) == json.dumps(  # type: ignore[arg-type]
            value, ensure_ascii=False, default=str, **options
        )


def test_fast_dumps_odd_values_and_errors() -> None:
    dumps = fast_dumps(sort_keys=True)
    value = {"b": [_Odd(), math.inf], "a": "é\u2028", 1.5: None}
    assert fast_dumps()(value) == json.dumps(value, ensure_ascii=False, default=str)
    for bad in ({"a": 1, 2: 3}, {(1,): 1}):  # unsortable keys, a tuple key: TypeError both
        try:
            json.dumps(bad, ensure_ascii=False, default=str, sort_keys=True)
        except TypeError:
            pass
        else:  # pragma: no cover
            raise AssertionError
        try:
            dumps(bad)
        except TypeError:
            pass
        else:  # pragma: no cover
            raise AssertionError


def test_to_json_and_dumps_bytes_keep_their_fallbacks() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert to_json(cyclic) == ('["<cycle>"]', False)
    assert dumps_bytes({"a": [1, "x"]}) == b'{"a":[1,"x"]}'
    assert dumps_bytes(cyclic) == b'["<cycle>"]'
