"""The path label and reason of a request forwarded without preparing it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxpolicy.gateway.unprepared import (
    API_NOT_PREPARED,
    NOT_A_MODEL_CALL,
    OTHER_PATH,
    classify,
)


def test_reasons() -> None:
    assert classify("GET", "/v1/models") == ("/v1/models", NOT_A_MODEL_CALL)
    assert classify("GET", "/v1/models/gpt-4o") == ("/v1/models", NOT_A_MODEL_CALL)
    assert classify("POST", "/v1/embeddings") == ("/v1/embeddings", NOT_A_MODEL_CALL)
    assert classify("POST", "/v1/messages/count_tokens") == (
        "/v1/messages/count_tokens",
        NOT_A_MODEL_CALL,
    )
    assert classify("POST", "/v1/responses") == ("/v1/responses", API_NOT_PREPARED)
    assert classify("GET", "/v1/responses/resp_1") == ("/v1/responses", NOT_A_MODEL_CALL)
    assert classify("POST", "/v1/completions") == ("/v1/completions", API_NOT_PREPARED)
    assert classify("GET", "/v1/chat/completions") == ("/v1/chat/completions", NOT_A_MODEL_CALL)
    assert classify("GET", "/favicon.ico") == ("other", OTHER_PATH)
    assert classify("GET", "/v2/models") == ("other", OTHER_PATH)


@given(st.sampled_from(["GET", "POST", "PUT"]), st.text(max_size=300))
def test_labels_are_a_bounded_set(method: str, tail: str) -> None:
    """A client cannot grow the metric: every label is one of a fixed few."""
    for path in ("/" + tail, "/v1/" + tail):
        label, reason = classify(method, path)
        assert label == "other" or (label.startswith("/v1/") and len(label) < 40)
        assert reason in (NOT_A_MODEL_CALL, API_NOT_PREPARED, OTHER_PATH)
        assert "\n" not in label and '"' not in label
