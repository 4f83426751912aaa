"""pytest plugin of ctxpolicy (registered through the ``pytest11`` entry point).

Makes the fixtures of :mod:`ctxpolicy.testing.fixtures` available to every test
suite in an environment where ctxpolicy is installed: ``ctxpolicy_session``,
``make_conversation`` and ``local_llm_server``. The conformance suites are plain
functions: ``from ctxpolicy.testing import conformance``.

Kept light: importing this module (which pytest does at start-up) imports neither
the engine nor tiktoken.
"""

from __future__ import annotations

from ctxpolicy.testing.fixtures import ctxpolicy_session, local_llm_server, make_conversation

__all__ = ["ctxpolicy_session", "local_llm_server", "make_conversation"]
