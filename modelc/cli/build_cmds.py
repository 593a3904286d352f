"""Build commands: containerize (a Docker build context) and compile (one executable file)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from modelc.cli.console import human_bytes, out


def containerize_cmd(
    artifact: str = typer.Argument(..., help=".modelc path or store name."),
    output: Path = typer.Option(..., "-o", "--output", help="Folder for the build context (new or empty)."),
    base_image: str = typer.Option("python:3.11-slim", "--base-image", help="Base image with Python >= 3.11."),
    pip_spec: str | None = typer.Option(
        None, "--pip", help="Install modelc with this pip spec instead of vendoring it."
    ),
) -> None:
    """Write Dockerfile, entrypoint.sh and .dockerignore that install modelc and serve the model.

    Example: modelc containerize tiny -o ./tiny-image && docker build -t tiny ./tiny-image
    """
    from modelc.build.containerize import containerize

    folder = containerize(artifact, output, base_image=base_image, pip_spec=pip_spec)
    out.print(f"wrote {folder}/Dockerfile; build it with: docker build -t modelc-model {folder}")
    out.print(
        "runtime settings: MODELC_PORT, MODELC_BIND, MODELC_API_KEY, MODELC_MAX_CONCURRENT, ... (see entrypoint.sh)"
    )


def compile_cmd(
    artifact: str = typer.Argument(..., help=".modelc path or store name."),
    output: Path = typer.Option(..., "-o", "--output", help="The executable file to write."),
    listen: str | None = typer.Option(None, "--listen", help="ADDR:PORT to serve on (overrides --bind/--port)."),
    bind: str = typer.Option("127.0.0.1", "--bind", help="Address to serve on."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Port to serve on."),
    target: str | None = typer.Option(
        None,
        "--target",
        help="Platform of the executable, e.g. linux-x86_64 (default: this machine's): one file with Python and "
        "every dependency inside (PyInstaller; only this machine's platform can be built). 'pyz': a Python "
        "zipapp instead (small, needs Python and modelc's dependencies installed).",
    ),
) -> None:
    """Build one executable file serving the model, which is mapped in place (not copied to memory).

    Example: modelc compile tiny -o tiny-app --listen 127.0.0.1:9000 && ./tiny-app
    """
    from modelc.build.zipapp import compile_app, parse_listen
    from modelc.version import version_line

    print(version_line(), file=sys.stderr)
    if target == "pyz":
        path = compile_app(artifact, output, bind=bind, port=port, listen=listen)
        out.print(f"compiled {path} ({human_bytes(path.stat().st_size)}); run it with: python3 {path}")
        return
    from modelc.build.exe import compile_executable, host_target

    host, port = parse_listen(listen, bind, port)
    path = compile_executable(artifact, output, target=target or host_target(), host=host, port=port)
    out.print(f"compiled {path} ({human_bytes(path.stat().st_size)}); run it with: ./{path.name}")


def register(app: typer.Typer) -> None:
    app.command("containerize")(containerize_cmd)
    app.command("compile")(compile_cmd)
