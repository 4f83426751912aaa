"""Errors the gateway answers with, and the upstream's errors as the engine reads them."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

from ctxpolicy.wire import WIRES

__all__ = ["RESP_DROP", "UpstreamError", "error_response"]

#: Upstream response headers not passed on (the gateway's server sets its own).
RESP_DROP = frozenset(
    {"content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding"}
)


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
