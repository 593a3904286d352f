"""The entry of a compiled executable (modelc compile --target): map the appended model, serve it."""

from __future__ import annotations

import sys

from modelc.build.compiled import run_app


def main(executable: str, argv: list[str]) -> int:
    from modelc.build.exe import read_trailer
    from modelc.version import __version__

    print(f"modelc {__version__} (compiled executable)", file=sys.stderr)

    def load():
        offset, length, config = read_trailer(executable)
        return config, lambda: (offset, length)

    return run_app(executable, argv, load)
