"""``acbslurm doctor``: check this node's acbslurm setup (acbslurm/doctor/)."""

from __future__ import annotations

import json

import click

from acbslurm.doctor import format_text, run_doctor


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--user",
    default=None,
    help="Check this user's rootless dockerd (root only; default: the calling user).",
)
@click.option("--node", default=None, help="Slurm's name for this node (default: host name).")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool, user: str | None, node: str | None) -> None:
    """Check slurm.conf's hooks, gres.conf against the GPUs, the NVIDIA hook, the user's
    rootless Docker, the record directory, the report's database or service and the
    Slurm version; print ok or what is wrong and how to fix it. Exit 1 on any failure."""
    checks = run_doctor(user=user, node=node)
    failed = any(c.failed for c in checks)
    if as_json:
        doc = {"ok": not failed, "checks": [c.as_dict() for c in checks]}
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(format_text(checks), nl=False)
    ctx.exit(1 if failed else 0)
