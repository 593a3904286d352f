"""The entry of a compiled app (after the bootstrap printed the version): map the embedded model, serve it.

The model is the app's own STORED zip member, mapped in place; the listen address was baked in
at compile time and can be overridden with --listen ADDR:PORT.
"""

from __future__ import annotations

import json
import sys
import zipfile

USAGE = """usage: APP [--listen ADDR:PORT] [--check] [--help]

Serves the model compiled into this file with modelc's HTTP API (OpenAI-compatible /v1 and native).
  --listen ADDR:PORT  listen here instead of the compiled-in address ({host}:{port})
  --check             verify the embedded model's checksums and exit
MODELC_API_KEY in the environment requires 'Authorization: Bearer KEY' (needed to listen beyond loopback).
"""


def main(archive: str, argv: list[str]) -> int:
    from modelc.build.zipapp import CONFIG_MEMBER, member_span

    def load():
        with zipfile.ZipFile(archive) as zf:
            config = json.loads(zf.read(CONFIG_MEMBER))
        return config, lambda: member_span(archive, config["model_member"])

    return run_app(archive, argv, load)


def run_app(path: str, argv: list[str], load) -> int:
    """The command line shared by compiled apps and executables.

    load() -> (config, span): the compiled-in settings and a callable giving the (offset, length)
    of the model inside `path`, called only once the arguments are accepted.
    """
    from modelc.artifact.reader import open_artifact
    from modelc.build.zipapp import parse_listen
    from modelc.errors import ModelcError

    try:
        config, span = load()
        host, port = config["host"], int(config["port"])
        args = list(argv)
        if "-h" in args or "--help" in args:
            print(USAGE.format(host=host, port=port), end="")
            return 0
        check = "--check" in args
        args = [a for a in args if a != "--check"]
        if args[:1] == ["--listen"] and len(args) == 2:
            host, port = parse_listen(args[1], host, port)
        elif args:
            print(
                f"error: unexpected arguments {' '.join(args)}\n" + USAGE.format(host=host, port=port),
                file=sys.stderr,
                end="",
            )
            return 2
        offset, length = span()
        art = open_artifact(path, verify=check, offset=offset, length=length)
        if check:
            print(f"ok: {art.name} ({art.architecture}, {len(art.tensors)} tensors) mapped at offset {offset}")
            return 0
        return _serve(art, host, port)
    except ModelcError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _serve(art, host: str, port: int) -> int:
    import anyio

    from modelc.server.daemon import serve

    def ready(bound_host: str, bound_port: int) -> None:
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        print(
            f"modelc: serving {art.name} on http://{shown}:{bound_port} (Ctrl+C to stop)", file=sys.stderr, flush=True
        )

    import os

    from modelc.server.state import ServerConfig

    # MODELC_API_KEY protects it; listening beyond loopback without one is refused by serve()
    config = ServerConfig(api_key=os.environ.get("MODELC_API_KEY") or None)
    anyio.run(lambda: serve(art, host=host, port=port, ready_cb=ready, server_config=config))
    return 0
