"""Errors the gateway answers with, and the upstream's errors as the engine reads them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.responses import JSONResponse

from ctxpolicy.wire import WIRES

__all__ = ["RESP_DROP", "UpstreamError", "body_chunks", "error_response"]

#: Upstream response headers not passed on (the gateway's server sets its own; the body
#: goes out decoded, :func:`body_chunks`).
RESP_DROP = frozenset(
    {"content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding"}
)


def body_chunks(resp: httpx.Response) -> AsyncIterator[bytes]:
    """The upstream answer's body as it arrives, decoded: the upstream's bytes as they
    are, or decompressed when the upstream compressed them (its ``content-encoding`` is
    not passed on, so the client must get what that header no longer names)."""
    if resp.headers.get("content-encoding", "identity").strip().lower() in ("", "identity"):
        return resp.aiter_raw()
    return resp.aiter_bytes()


class UpstreamError(Exception):
    """An upstream HTTP error, shaped so :func:`is_context_overflow` can read it."""

    def __init__(self, status_code: int, text: str) -> None:
        self.status_code = status_code
        self.body: Any
        try:
            self.body = json.loads(text)
        except ValueError:
            self.body = text
        err = self.body.get("error") if isinstance(self.body, dict) else None
        self.message = str(err.get("message", text)) if isinstance(err, dict) else text
        self.code = err.get("code") if isinstance(err, dict) else None
        super().__init__(f"upstream HTTP {status_code}: {text[:2000]}")


def error_response(status: int, message: str, api: str = "chat") -> JSONResponse:
    """The gateway's own error, in the wire format of the request's API."""
    wire = WIRES.get(api, WIRES["chat"])
    return JSONResponse(wire.error_body(status, message), status_code=status)
