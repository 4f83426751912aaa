"""Where a request goes: its agent type (path prefix, header, or default) and its provider
(every Anthropic path to the Anthropic upstream, every OpenAI path to the OpenAI one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "AGENT_HEADER",
    "ANTHROPIC",
    "API_RESOURCES",
    "OPENAI",
    "PREPARED",
    "UnknownAgent",
    "Unplaced",
    "provider_of",
    "resolve_agent",
]

AGENT_HEADER = "x-ctxpolicy-agent"


class UnknownAgent(LookupError):
    """The request named an agent the policy file does not define (or none at all)."""

    def __init__(self, name: str | None, agents: Sequence[str]) -> None:
        self.name = name
        self.agents = list(agents)
        known = ", ".join(self.agents) or "(none)"
        if name is None:
            msg = (
                "no agent type: use the path /agents/{name}/v1/..., the header "
                f"X-Ctxpolicy-Agent, or start the gateway with --agent; agents: {known}"
            )
        else:
            msg = f"unknown agent {name[:80]!r}; agents in the policy file: {known}"
        super().__init__(msg)


def resolve_agent(
    path: str, headers: Mapping[str, str], default: str | None, agents: Sequence[str]
) -> tuple[str, str]:
    """``(agent, path without the /agents/{name} prefix)``; raises :class:`UnknownAgent`."""
    name: str | None = None
    rest = path
    if path.startswith("/agents/"):
        head, sep, tail = path[len("/agents/") :].partition("/")
        name = head
        rest = "/" + tail if sep else "/"
    if name is None:
        name = headers.get(AGENT_HEADER) or None
    if name is None:
        name = default
    if name is None or name not in agents:
        raise UnknownAgent(name, agents)
    return name, rest


# -- routing by provider ------------------------------------------------------------------

OPENAI = "openai"
ANTHROPIC = "anthropic"

#: Paths only Anthropic serves (the first segment after /v1/).
_ANTHROPIC_ONLY = frozenset({"messages", "complete"})
#: Paths both providers serve: Anthropic when the request carries ``anthropic-version``.
_SHARED = frozenset({"models", "files", "batches"})
#: OpenAI's resources (the first segment after /v1/).
_OPENAI = frozenset(
    {
        "chat",
        "responses",
        "completions",
        "embeddings",
        "moderations",
        "audio",
        "images",
        "uploads",
        "fine_tuning",
        "vector_stores",
        "assistants",
        "threads",
        "realtime",
        "conversations",
        "containers",
        "evals",
        "organization",
    }
)
#: Every resource of the providers' APIs (the first segment after /v1/).
API_RESOURCES = _ANTHROPIC_ONLY | _SHARED | _OPENAI
#: Paths the gateway prepares: ``(provider, path) -> wire``.
PREPARED = {
    (OPENAI, "/v1/chat/completions"): "chat",
    (OPENAI, "/v1/responses"): "responses",
    (ANTHROPIC, "/v1/messages"): "anthropic",
}


class Unplaced(LookupError):
    """A path the gateway cannot attribute to a provider (HTTP 404)."""


def provider_of(path: str, headers: Mapping[str, str]) -> str:
    """The provider a path (without the ``/agents/{name}`` prefix) goes to; raises
    :class:`Unplaced`. Anthropic: ``/v1/messages*`` and ``/v1/complete``, and ``models``,
    ``files``, ``batches`` when the request carries ``anthropic-version``; OpenAI: its own
    resources (chat, responses, embeddings, ...) and those shared ones otherwise."""
    head = path[len("/v1/") :].split("/", 1)[0] if path.startswith("/v1/") else ""
    if head in _ANTHROPIC_ONLY:
        return ANTHROPIC
    if head in _SHARED:
        return ANTHROPIC if headers.get("anthropic-version") else OPENAI
    if head in _OPENAI:
        return OPENAI
    raise Unplaced(
        f"no provider serves {path[:200]!r} through this gateway: it forwards OpenAI paths "
        "(/v1/chat/completions, /v1/responses, /v1/embeddings, /v1/models, ...) and "
        "Anthropic paths (/v1/messages, /v1/messages/count_tokens, /v1/messages/batches, "
        "/v1/models with anthropic-version); a base URL normally ends in /v1 for OpenAI "
        "clients and has no path for Anthropic clients"
    )
