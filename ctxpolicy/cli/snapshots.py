"""``ctxpolicy snapshots``: list, show and prune the stored full tool results."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from ctxpolicy.cli._shared import F, agent_option, load_agent, policy_option


def _where(f: F) -> F:
    """The store a command reads: ``--policy`` (and ``--agent``), or ``--root``."""
    options = (
        policy_option(
            "Policy file whose agent's `snapshots` settings apply (`snapshots.path`: the store).",
            required=False,
        ),
        agent_option(),
        click.option(
            "--root", default=None, help="Store root (instead of the policy's snapshots.path)."
        ),
    )
    for option in reversed(options):
        f = option(f)
    return f


@click.group("snapshots")
def snapshots() -> None:
    """Manage stored full tool results (snapshots)."""


@snapshots.command("prune")
@_where
@click.option(
    "--max-age-days",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Remove snapshots older than this (default: the policy's, else the store's: 30).",
)
@click.option(
    "--max-total-mb",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Then remove the oldest until the store is this small (default: the policy's, "
    "else the store's: 1024).",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def prune_cmd(
    ctx: click.Context,
    policy_file: str | None,
    agent: str,
    root: str | None,
    max_age_days: float | None,
    max_total_mb: float | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Apply retention to a local snapshot store now (sessions also apply it while
    they write; this is for stores no session writes to any more).

    Exit 0 on success, 1 when the policy does not resolve, 2 on usage errors.
    """
    from ctxpolicy.policy.paths import interpolate_path
    from ctxpolicy.snapshots import prune

    if policy_file is None and root is None:
        raise click.UsageError("give --policy (and --agent) or --root")
    if policy_file is not None:
        snaps = load_agent(ctx, policy_file, agent, code=1).snapshots
        if snaps.store != "local" and root is None:
            raise click.UsageError(
                f"prune handles the `local` store; this agent uses {snaps.store!r}"
            )
        if root is None:
            try:
                root = interpolate_path(snaps.path)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from exc
        from ctxpolicy.snapshots import LocalOptions

        try:  # the store's own defaults (30 days, 1024 MB) unless the policy overrides
            store_opts = LocalOptions.model_validate(dict(snaps.options))
        except ValueError:
            store_opts = LocalOptions()
        if max_age_days is None:
            max_age_days = snaps.max_age_days or store_opts.max_age_days
        if max_total_mb is None:
            max_total_mb = snaps.max_total_mb or store_opts.max_total_mb
    if max_age_days is None and max_total_mb is None:
        raise click.UsageError(
            "no retention set: give --max-age-days/--max-total-mb or set them in the policy"
        )
    assert root is not None
    report = prune(root, max_age_days=max_age_days, max_total_mb=max_total_mb, dry_run=dry_run)
    if as_json:
        json.dump(
            {
                "root": root,
                "dry_run": dry_run,
                "removed": report.removed,
                "removed_bytes": report.removed_bytes,
                "kept_files": report.kept_files,
                "kept_bytes": report.kept_bytes,
                "evicted_conversations": report.evicted_conversations,
                "partly_evicted": report.partly_evicted,
            },
            sys.stdout,
            indent=2,
        )
        click.echo()
        return
    verb = "would remove" if dry_run else "removed"
    for p in report.removed:
        click.echo(f"{verb} {p}")
    click.echo(
        f"{root}: {verb} {len(report.removed)} files (snapshot files and segments, archive "
        f"segments; {report.removed_bytes / 1e6:.1f} MB); "
        f"kept {report.kept_files} ({report.kept_bytes / 1e6:.1f} MB)"
    )
    if report.evicted_conversations or report.partly_evicted:
        click.echo(
            f"conversations emptied: {len(report.evicted_conversations)}; "
            f"partly pruned (marked, their sessions report data.lost): "
            f"{len(report.partly_evicted)}"
        )


def _store_root(ctx: click.Context, policy_file: str | None, agent: str, root: str | None) -> str:
    """The local store's root: ``--root``, else the policy's ``snapshots.path``."""
    if root is not None:
        return root
    if policy_file is None:
        raise click.UsageError("give --policy (and --agent) or --root")
    from ctxpolicy.engine.tool_results import interpolate_path

    policy = load_agent(ctx, policy_file, agent, code=1)
    if policy.snapshots.store != "local":
        raise click.UsageError(
            f"list and show read the `local` store; this agent uses {policy.snapshots.store!r}"
        )
    try:
        return interpolate_path(policy.snapshots.path)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


@snapshots.command("list")
@click.argument("conversation", required=False)
@_where
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_cmd(
    ctx: click.Context,
    conversation: str | None,
    policy_file: str | None,
    agent: str,
    root: str | None,
    as_json: bool,
) -> None:
    """List the conversations of a local store (snapshots and bytes of each), or with
    CONVERSATION (its conv_id or folder name) its snapshots, in step order.

    Exit 0 on success, 1 when the policy does not resolve or the conversation is
    unknown, 2 on usage errors.
    """
    from ctxpolicy.snapshots import LocalStore, SnapshotError
    from ctxpolicy.snapshots.names import SNAP_SEGMENT_RE, is_store_folder

    base = _store_root(ctx, policy_file, agent, root)
    store = LocalStore(root=base)
    if conversation is None:
        rows: list[dict[str, Any]] = []
        if store.root_path.is_dir():
            for entry in sorted(os.scandir(store.root_path), key=lambda e: e.name):
                if not entry.is_dir(follow_symlinks=False) or not is_store_folder(entry.name):
                    continue
                # snapshots: files and segment records; bytes: the files that hold them
                files = [
                    f
                    for f in os.scandir(entry.path)
                    if f.name.endswith(".json") or SNAP_SEGMENT_RE.match(f.name)
                ]
                size = sum(f.stat(follow_symlinks=False).st_size for f in files)
                count = len(store.list_folder(entry.name))
                rows.append({"folder": entry.name, "snapshots": count, "bytes": size})
        if as_json:
            click.echo(json.dumps({"root": store.root, "conversations": rows}, indent=2))
            return
        for row in rows:
            click.echo(
                f"{row['folder']}  {row['snapshots']} snapshot(s)  {row['bytes'] / 1e3:.1f} kB"
            )
        click.echo(f"{store.root}: {len(rows)} conversation(s)")
        return
    try:
        refs = store.list(conversation)
        if not refs and is_store_folder(conversation):
            # a folder name as `list` prints it (a conv_id may map to another folder)
            refs = store.list_folder(conversation)
    except SnapshotError as exc:
        click.echo(f"ctxpolicy snapshots list: {exc.strerror or exc}", err=True)
        ctx.exit(1)
        return
    if not refs:
        click.echo(
            f"ctxpolicy snapshots list: no snapshots for {conversation!r} under {base}", err=True
        )
        ctx.exit(1)
        return
    if as_json:
        click.echo(
            json.dumps([{"uri": r.uri, "path": r.path, "name": r.name} for r in refs], indent=2)
        )
        return
    for r in refs:  # a record of a segment has no path of its own
        click.echo(f"{r.uri}  {r.path}" if r.path else r.uri)


@snapshots.command("show")
@click.argument("ref")
@_where
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def show_cmd(
    ctx: click.Context,
    ref: str,
    policy_file: str | None,
    agent: str,
    root: str | None,
    as_json: bool,
) -> None:
    """Print one snapshot: REF is its ``ctxsnap://<conversation>/<name>`` reference or
    its path (as in ``[Full detail available at: ...]``). Text: the fields, then the
    full observation; --json: the document as stored.

    Exit 0 on success, 1 when there is no such snapshot in the store, 2 on usage errors.
    """
    from ctxpolicy.snapshots import LocalStore, SnapshotError

    store = LocalStore(root=_store_root(ctx, policy_file, agent, root))
    try:
        doc = store.read(ref)
    except SnapshotError as exc:
        click.echo(f"ctxpolicy snapshots show: {exc.strerror or exc}", err=True)
        ctx.exit(1)
        return
    if as_json:
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    for key, value in doc.items():
        if key != "observation":
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            click.echo(f"{key}: {shown}")
    observation = doc.get("observation")
    if observation is not None:
        click.echo("observation:")
        text = observation if isinstance(observation, str) else json.dumps(observation, indent=2)
        click.echo(text)
