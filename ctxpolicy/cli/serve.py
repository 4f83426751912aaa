"""``ctxpolicy serve``: the policy-driven OpenAI/Anthropic-compatible gateway (docs/gateway.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import sys

import click

from ctxpolicy.cli._shared import policy_option

__all__ = ["KEEP_ALIVE_S", "serve"]

#: Seconds an idle client connection is kept open. Longer than the clients' own pool
#: expiry (httpx and the OpenAI/Anthropic SDKs: 5 s), so a client never reuses a
#: connection the gateway is closing at that moment (a lost request).
KEEP_ALIVE_S = 75


def _extra() -> str:
    from ctxpolicy._install import extra_hint

    return f"ctxpolicy serve needs the gateway extra (starlette, uvicorn, httpx): {extra_hint('gateway')}"


@click.command("serve")
@policy_option("Policy file (YAML or TOML); every agent in it is served.")
@click.option(
    "--agent",
    default=None,
    help="Agent type of requests that name none (no /agents/{name} prefix, no "
    "X-Ctxpolicy-Agent header). Without it such requests get a 404 naming the agents.",
)
@click.option(
    "--upstream",
    required=True,
    help="Provider base URL of every OpenAI path (/v1/chat/completions, /v1/responses, "
    "/v1/embeddings, /v1/models, ...), e.g. https://api.openai.com (a trailing /v1 is "
    "accepted); also of the Anthropic paths when --anthropic-upstream is not given.",
)
@click.option(
    "--anthropic-upstream",
    default=None,
    help="Provider base URL of every Anthropic path (/v1/messages, "
    "/v1/messages/count_tokens, /v1/messages/batches, and /v1/models, /v1/files with an "
    "anthropic-version header), e.g. https://api.anthropic.com (default: --upstream).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8787, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Worker processes. Above 1, give the policy a shared state store "
    "(state: {store: postgres}) so a conversation resumes on any worker.",
)
@click.option(
    "--recall/--no-recall",
    default=False,
    show_default=True,
    help="Offer ctx_recall/ctx_search to the model and answer those calls inside the "
    "gateway, streamed or not (a streamed answer reaches the client once it is not a "
    "recall-only call).",
)
@click.option(
    "--recall-rounds",
    default=4,
    show_default=True,
    type=click.IntRange(0, 32),
    help="Most recall-only rounds answered inside the gateway per request.",
)
@click.option(
    "--stream-usage/--no-stream-usage",
    default=True,
    show_default=True,
    help="Ask OpenAI-style upstreams for the usage chunk of a stream "
    "(stream_options.include_usage) so record_usage gets the provider's prompt tokens; "
    "the chunk is kept from clients that did not ask for it.",
)
@click.option(
    "--api-key-env",
    "--openai-api-key-env",
    "api_key_env",
    default=None,
    metavar="NAME",
    help="Environment variable holding the server's key for --upstream, sent instead of "
    "the client's credential (also to the Anthropic paths when there is no "
    "--anthropic-upstream). A client must then present a credential of its own (its "
    "API key or X-Ctxpolicy-Token), else HTTP 401: it names the client's tenant.",
)
@click.option(
    "--anthropic-api-key-env",
    default=None,
    metavar="NAME",
    help="Environment variable holding the server's key for --anthropic-upstream (sent as "
    "x-api-key instead of the client's). Without it the client's own key goes there.",
)
@click.option(
    "--client-token-env",
    default=None,
    metavar="NAME",
    help="Environment variable holding the gateway tokens (comma-separated) a client must "
    "present, as its API key when the gateway holds the provider key, else in the "
    "X-Ctxpolicy-Token header; other requests get HTTP 401. The token is the client's "
    "tenant: its conversations are its own.",
)
@click.option(
    "--session-header",
    "session_headers",
    multiple=True,
    metavar="NAME",
    help="A request header holding the client's own session id, tried before the built-in "
    "ones (x-claude-code-session-id, session-id, session_id, x-session-id; then the body's "
    "prompt_cache_key, metadata.user_id, user). Repeatable.",
)
@click.option(
    "--max-body-bytes",
    default=32 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1024, None),
    help="Largest request body accepted; larger ones get HTTP 413.",
)
@click.option(
    "--max-sessions",
    default=4096,
    show_default=True,
    type=click.IntRange(1, None),
    help="Conversations kept open per worker (least recently used closed; they resume "
    "from the state store).",
)
@click.option(
    "--engine-processes",
    default=0,
    show_default=True,
    type=click.IntRange(0, 256),
    envvar="CTXPOLICY_ENGINE_PROCESSES",
    help="Engine processes per worker. 0: the engine runs in the worker's threads. N: a "
    "conversation moves to one of N processes at its first heavy request (200 messages "
    "or 400,000 characters; CTXPOLICY_ENGINE_HEAVY), so one long history never slows "
    "the other conversations. Give the policy a durable state store (sqlite, postgres).",
)
@click.option(
    "--keep-alive",
    default=KEEP_ALIVE_S,
    show_default=True,
    type=click.IntRange(1, 3600),
    help="Seconds an idle client connection stays open. Keep it above the clients' own "
    "keep-alive expiry (5 s in httpx and the OpenAI/Anthropic SDKs), else a request sent "
    "on a connection the gateway is closing fails.",
)
@click.option(
    "--record",
    "record",
    default=None,
    type=click.Path(file_okay=False, writable=True),
    help="Record every conversation as a trace `ctxpolicy simulate` and `tune` replay: "
    "DIR gets one <conversation>.jsonl per conversation (append-only, 0600), the messages "
    "as the client sent them, tool results raw. Created if missing.",
)
@click.option(
    "--dashboard/--no-dashboard",
    default=False,
    show_default=True,
    help="Serve a live page at /dashboard: each conversation's context over time, its "
    "compactions and the layer that fired, tokens and estimated cost saved, prompt-cache "
    "reads and writes, overflows, requests forwarded unprepared, upstream latency. "
    "Numbers and names only; with client tokens its data needs one (docs/observability.md).",
)
@click.option(
    "--events",
    "events",
    default=None,
    type=click.Path(dir_okay=False, writable=True),
    help="Append every session's events to this file, one JSON object per line with its "
    "agent (numbers and names, as JsonlEventSink writes them): `ctxpolicy report FILE` "
    "shows them. Workers append to the same file.",
)
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    help="uvicorn log level.",
)
@click.option(
    "--http",
    "http_impl",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "httptools", "h11"]),
    help="HTTP parser of the server: httptools (C, comes with the gateway extra) or h11 "
    "(pure Python); auto takes httptools when installed.",
)
@click.option(
    "--loop",
    "loop_impl",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "uvloop", "asyncio"]),
    help="Event loop: uvloop (libuv, comes with the gateway extra on Linux and macOS) or "
    "asyncio's own; auto takes uvloop when installed.",
)
def serve(
    policy_file: str,
    agent: str | None,
    upstream: str,
    anthropic_upstream: str | None,
    host: str,
    port: int,
    workers: int,
    recall: bool,
    recall_rounds: int,
    stream_usage: bool,
    api_key_env: str | None,
    anthropic_api_key_env: str | None,
    client_token_env: str | None,
    session_headers: tuple[str, ...],
    max_body_bytes: int,
    max_sessions: int,
    engine_processes: int,
    keep_alive: int,
    record: str | None,
    dashboard: bool,
    events: str | None,
    log_level: str,
    http_impl: str,
    loop_impl: str,
) -> None:
    """Run the policy-driven gateway: point any OpenAI- or Anthropic-compatible client's
    base URL at it (http://HOST:PORT/v1, or http://HOST:PORT/agents/NAME/v1).

    \b
    Routing: every Anthropic path goes to --anthropic-upstream with its key, every
    OpenAI path to --upstream with its key; a path neither provider serves is a 404,
    never forwarded with the wrong key. POST /v1/chat/completions, /v1/responses
    (stateless form; with previous_response_id forwarded unprepared) and /v1/messages
    are prepared by the policy; other paths are forwarded unchanged.

    \b
    Agent type: the path /agents/NAME/..., else the X-Ctxpolicy-Agent header, else --agent.
    Presets for the coding agents: --policy policies/coding_clients.yaml with the agents
    claude_code, codex_cli, aider, opencode (their tool names, windows their prefix fits).

    \b
    Conversation, scoped by tenant (the client's credential) and agent:
      1. the X-Ctxpolicy-Conversation header;
      2. the client's own session id: Claude Code x-claude-code-session-id, Codex
         session-id / prompt_cache_key, opencode x-session-id, SDK metadata.user_id /
         user (more with --session-header);
      3. continuity: the conversation whose last request is a prefix of this one (two
         sessions with the same opening part at their first difference).

    Set CTXPOLICY_GATEWAY_SECRET to the same value on every worker and machine of a
    fleet, so conversation ids are the same everywhere (without it a random per-start
    secret is used and printed nowhere). Continuity is per worker: across a fleet,
    clients should send a session id.
    """
    for mod in ("starlette", "uvicorn", "httpx"):
        if importlib.util.find_spec(mod) is None:
            click.echo(f"ctxpolicy serve: {_extra()}", err=True)
            sys.exit(2)
    for url in (upstream, anthropic_upstream):
        if url is not None and not url.startswith(("http://", "https://")):
            raise click.BadParameter(f"not an http(s) URL: {url!r}", param_hint="--upstream")
    for env_name, hint in (
        (api_key_env, "--api-key-env"),
        (anthropic_api_key_env, "--anthropic-api-key-env"),
        (client_token_env, "--client-token-env"),
    ):
        if env_name and not os.environ.get(env_name, "").strip():
            raise click.BadParameter(
                f"environment variable {env_name} is not set or empty", param_hint=hint
            )
    if anthropic_api_key_env and not anthropic_upstream:
        raise click.BadParameter(
            "a key for --anthropic-upstream, but no --anthropic-upstream (the Anthropic paths "
            "go to --upstream with --api-key-env's key)",
            param_hint="--anthropic-api-key-env",
        )
    from ctxpolicy.gateway.config import server_impls
    from ctxpolicy.gateway.identity import valid_header_name

    try:
        http_impl, loop_impl = server_impls(http_impl, loop_impl)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--http/--loop") from None

    for name in session_headers:
        if not valid_header_name(name):
            raise click.BadParameter(f"not a header name: {name!r}", param_hint="--session-header")

    from ctxpolicy.resolve.load import list_agents, resolve_all

    policies, diags = resolve_all(policy_file)
    errors = [d for d in diags if d.severity == "error"]
    for d in errors:
        click.echo(d.format(), err=True)
    if not policies:
        click.echo(f"ctxpolicy serve: {policy_file}: no agent resolves without errors", err=True)
        sys.exit(1)
    unserved = [a for a in list_agents(policy_file) if a not in policies]
    if unserved:  # the others are served; these answer 404 until the file is fixed
        click.echo(
            f"ctxpolicy serve: not serving {', '.join(unserved)} (errors above); "
            f"serving {', '.join(sorted(policies))}",
            err=True,
        )
    if agent is not None and agent not in policies:
        raise click.BadParameter(
            f"unknown agent {agent!r}; agents: {', '.join(sorted(policies))}",
            param_hint="--agent",
        )
    if record:
        try:
            os.makedirs(record, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot create the directory {record!r}: {exc.strerror or exc}",
                param_hint="--record",
            ) from None
    os.environ.setdefault("CTXPOLICY_GATEWAY_SECRET", secrets.token_hex(32))
    os.environ["CTXPOLICY_GATEWAY_CONFIG"] = json.dumps(
        {
            "policy": os.path.abspath(policy_file),
            "upstream": upstream,
            "anthropic_upstream": anthropic_upstream,
            "default_agent": agent,
            "recall": recall,
            "recall_rounds": recall_rounds,
            "stream_usage": stream_usage,
            "api_key_env": api_key_env,
            "anthropic_api_key_env": anthropic_api_key_env,
            "client_token_env": client_token_env,
            "session_headers": list(session_headers),
            "max_body_bytes": max_body_bytes,
            "max_sessions": max_sessions,
            "engine_processes": engine_processes,
            "record": os.path.abspath(record) if record else None,
            "dashboard": dashboard,
            "events": os.path.abspath(events) if events else None,
        }
    )
    import uvicorn

    click.echo(
        f"ctxpolicy serve: agents {', '.join(sorted(policies))} on http://{host}:{port} "
        f"-> {upstream}"
        + (f" (anthropic {anthropic_upstream})" if anthropic_upstream else "")
        + (f"; dashboard http://{host}:{port}/dashboard" if dashboard else "")
        + f" ({http_impl}, {loop_impl})",
        err=True,
    )
    uvicorn.run(
        "ctxpolicy.gateway.app:create_app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=keep_alive,
        http=http_impl,
        loop=loop_impl,
    )
