"""Which agent type (policy) a request belongs to: path prefix, header, or default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["AGENT_HEADER", "UnknownAgent", "resolve_agent"]

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
