"""What every command prints with: the stdout and stderr consoles, a progress bar, byte counts for people,
strict JSON for --json."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr (hidden when not a terminal); yields progress(done, total)."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def json_text(data: Any, indent: int | None = None) -> str:
    """--json output as strict JSON (RFC 8259, what every parser reads): a float that is not finite (a
    model's metadata may hold NaN) becomes the string the text output shows ("NaN", "Infinity",
    "-Infinity"); numpy scalars and arrays become numbers and lists; anything else its str()."""
    return json.dumps(_strict(data), default=str, indent=indent, allow_nan=False)


def _strict(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _strict(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_strict(x) for x in v]
    if hasattr(v, "tolist") and not isinstance(v, str | bytes):  # numpy scalars and arrays
        v = v.tolist()
        if isinstance(v, list):
            return _strict(v)
    if isinstance(v, float) and not math.isfinite(v):
        return json.dumps(v)  # "NaN", "Infinity", "-Infinity": what json.dumps (the text output) writes
    return v
