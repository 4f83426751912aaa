import pytest
from pydantic import ValidationError

from ctxpolicy.components import (
    CallableOptions,
    CallableSummarizer,
    SummaryRequest,
    register_callable,
    unregister_callable,
)

REQ = SummaryRequest(
    messages=[{"role": "user", "content": "hi"}],
    previous_summary=None,
    max_tokens=10,
    instructions="",
)


def test_from_function_and_registry():
    assert (
        CallableSummarizer.from_function(lambda r: "fn:" + r.messages[0]["content"]).summarize(REQ)
        == "fn:hi"
    )
    register_callable("mine", lambda r: "reg")
    try:
        assert CallableSummarizer(CallableOptions(ref="mine")).summarize(REQ) == "reg"
    finally:
        unregister_callable("mine")
    with pytest.raises(LookupError, match="no function registered as 'mine'"):
        CallableSummarizer(CallableOptions(ref="mine")).summarize(REQ)
    with pytest.raises(LookupError):
        CallableSummarizer().summarize(REQ)


def test_no_import_paths_in_options():
    with pytest.raises(ValidationError):
        CallableOptions(ref="os:system")
    with pytest.raises(ValidationError):
        CallableOptions(ref="x", path="os.system")
