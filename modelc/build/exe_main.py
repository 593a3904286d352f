"""The entry of a compiled executable (modelc compile --target): map the appended model, serve it."""

from __future__ import annotations

import sys

from modelc.build.compiled import USAGE, _serve


def main(executable: str, argv: list[str]) -> int:
    from modelc import __version__
    from modelc.artifact.reader import open_artifact
    from modelc.build.exe import read_trailer
    from modelc.build.zipapp import parse_listen
    from modelc.errors import ModelcError

    print(f"modelc {__version__} (compiled executable)", file=sys.stderr)
    try:
        offset, length, config = read_trailer(executable)
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
            print(f"error: unexpected arguments {' '.join(args)}\n" + USAGE.format(host=host, port=port),
                  file=sys.stderr, end="")  # fmt: skip
            return 2
        art = open_artifact(executable, verify=check, offset=offset, length=length)
        if check:
            print(f"ok: {art.name} ({art.architecture}, {len(art.tensors)} tensors) mapped at offset {offset}")
            return 0
        return _serve(art, host, port)
    except ModelcError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
