"""The `modelc` command: builds the typer app from one module per area and maps errors to one line.

No command logic here: each area module exposes `register(app)`. The area modules (and build/) import
what a command needs inside the command function: every area is imported to build the app, so this keeps
`modelc --help` and `modelc --version` from loading numpy, numba, quart or the model stack.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from modelc.errors import ModelcError
from modelc.version import version_line

AREAS = (
    "store_cmds",
    "run_cmds",
    "daemon_cmds",
    "bench_cmds",
    "registry_cmds",
    "build_cmds",
    "eval_cmds",
    "warmup_cmds",
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit()


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="modelc",
        help="Turn model weights into one .modelc file and serve it fast on CPUs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=_version_callback, is_eager=True, help="Print the version and git sha."
        ),
    ) -> None:
        """modelc: pack weights into one file, serve them with an OpenAI-compatible API."""

    for area in AREAS:
        importlib.import_module(f"modelc.cli.{area}").register(app)
    return app


def main(argv: list[str] | None = None) -> int:
    app = build_app()
    try:
        app(args=argv, standalone_mode=False)
    except ModelcError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # typer.Exit / click usage errors
        return int(e.code or 0) if isinstance(e.code, int) else 1
    except Exception as e:  # click's usage errors, Exit and Abort (typer bundles its own click)
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()  # a usage error: click's own one-line message
            return e.exit_code
        if isinstance(getattr(e, "exit_code", None), int):  # Exit
            return e.exit_code
        if type(e).__name__ == "Abort":
            print("error: aborted", file=sys.stderr)
            return 1
        return _unexpected(e)
    return 0


def _unexpected(e: Exception) -> int:
    """Anything else still ends in one `error:` line (MODELC_TRACEBACK=1 shows the traceback)."""
    if os.environ.get("MODELC_TRACEBACK"):
        raise e
    if isinstance(e, RecursionError):
        print("error: the input is nested too deeply to read (recursion limit)", file=sys.stderr)
    elif isinstance(e, OSError):
        where = f": {e.filename}" if e.filename else ""
        print(f"error: {e.strerror or e}{where}", file=sys.stderr)
    elif isinstance(e, MemoryError):
        print("error: out of memory", file=sys.stderr)
    else:
        print(f"error: internal error: {type(e).__name__}: {e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
