"""The ``acbslurm`` entry point.

Subcommands are imported lazily so that ``acbslurm render`` does not pay for Docker,
MariaDB or gRPC imports, and the Slurm hooks stay fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from acbslurm import __version__
from acbslurm.cli.logsetup import configure_logging
from acbslurm.errors import AcbslurmError

# name -> "module:attribute"; each module owns its commands.
COMMANDS: dict[str, str] = {
    "sandbox": "acbslurm.cli.sandbox:sandbox",
    "demo": "acbslurm.cli.demo:demo",
    "render": "acbslurm.cli.jobs:render",
    "submit": "acbslurm.cli.jobs:submit",
    "status": "acbslurm.cli.jobstatus:status",
    "cancel": "acbslurm.cli.jobstatus:cancel",
    "run": "acbslurm.cli.container:run",
    "prolog": "acbslurm.cli.hooks:prolog",
    "epilog": "acbslurm.cli.hooks:epilog",
    "task-prolog": "acbslurm.cli.hooks:task_prolog",
    "gpus": "acbslurm.cli.hooks:gpus",
    "install-runtime": "acbslurm.cli.hooks:install_runtime",
    "report": "acbslurm.cli.report:report",
    "broker": "acbslurm.cli.broker:broker",
    "serve": "acbslurm.cli.serve:serve",
    "doctor": "acbslurm.cli.doctor:doctor",
}


class LazyGroup(click.Group):
    # click's interface passes ctx whether a method needs it or not (noqa: ARG002).
    def list_commands(self, ctx: click.Context) -> list[str]:  # noqa: ARG002
        return sorted(name for name in COMMANDS if self._spec_exists(name))

    @staticmethod
    def _spec_exists(name: str) -> bool:
        module = COMMANDS[name].split(":")[0]
        return importlib.util.find_spec(module) is not None

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:  # noqa: ARG002
        target = COMMANDS.get(cmd_name)
        if target is None or not self._spec_exists(cmd_name):
            return None
        module_name, attr = target.split(":")
        cmd = getattr(importlib.import_module(module_name), attr)
        assert isinstance(cmd, click.Command)
        return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="acbslurm")
@click.option("-v", "--verbose", count=True, help="More log output (repeat for debug).")
def cli(verbose: int) -> None:
    """Slurm-integrated GPU container jobs, GPU accounting reports and a GPU broker."""
    configure_logging(verbose)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: library errors become one message and an exit code.

    A reader that goes away (``acbslurm report ... | head``) ends the command quietly,
    whichever command was writing, with the shell's code for SIGPIPE.
    """
    try:
        code = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # Nothing more can be said on stdout, and the interpreter's final flush at exit
        # must not fail too.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = BROKEN_PIPE_EXIT
    sys.exit(code)


# 128 + SIGPIPE, what a shell reports for a writer whose reader went away.
BROKEN_PIPE_EXIT = 141


def _main(argv: list[str] | None) -> int:
    try:
        # standalone_mode=False returns ctx.exit()'s code instead of exiting.
        rv = cli.main(args=argv, prog_name="acbslurm", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except AcbslurmError as exc:
        click.echo(f"Error: {exc}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return rv if isinstance(rv, int) else 0
