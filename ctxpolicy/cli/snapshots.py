"""``ctxpolicy snapshots``: manage the snapshot store (retention)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


@click.group("snapshots")
def snapshots() -> None:
    """Manage stored full tool results (snapshots)."""


@snapshots.command("prune")
@click.option(
    "--policy",
    "policy_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Policy file whose agent's `snapshots` settings apply.",
)
@click.option(
    "--agent", default="default", show_default=True, help="Agent type in the policy file."
)
@click.option(
    "--root", "root", default=None, help="Store root (instead of the policy's snapshots.path)."
)
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
    policy_path: Path | None,
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

    if policy_path is None and root is None:
        raise click.UsageError("give --policy (and --agent) or --root")
    if policy_path is not None:
        from ctxpolicy.policy.diagnostics import PolicyError
        from ctxpolicy.policy.resolve import load_policy

        try:
            policy = load_policy(str(policy_path), agent)
        except PolicyError as exc:
            for d in exc.diagnostics:
                click.echo(d.format(), err=True)
            ctx.exit(1)
            return
        snaps = policy.snapshots
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
        f"{root}: {verb} {len(report.removed)} snapshots ({report.removed_bytes / 1e6:.1f} MB); "
        f"kept {report.kept_files} ({report.kept_bytes / 1e6:.1f} MB)"
    )
