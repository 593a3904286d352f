"""Request fields a route ignores are logged as a warning (as vLLM does), so a misspelt
`temprature` or an OpenAI / Ollama feature modelc does not have is visible in the log instead of silent.

"Ignored" means what the route actually did, on every route: the parsed body is a ReadFields, a dict
that records which top-level fields the handler looked at (get, [], in, pop, setdefault). When the
request succeeds, the fields never looked at are the ignored ones (modelc.server.handling logs them
with the request); so are the unread keys of Ollama's `options` object (`options.mirostat`). Anything
that walks the whole body (iteration, items(), `{**body}`, a copy) counts as reading every field, so
a route that forwards its body never reports false warnings. Pure.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from typing import Any

MAX_REPORTED = 20  # field names per warning (each cut to 64 characters)
# Fields that have no effect on a local server by design, never worth a warning: OpenAI's end-user
# id (for its abuse monitoring).
NO_EFFECT = frozenset({"user"})
# Objects of named options whose own fields are tracked too (reported as `options.mirostat`):
# Ollama's `options`, where unknown keys are otherwise accepted without a word.
NESTED = frozenset({"options"})


class ReadFields(dict):
    """A request body (a plain dict to every caller) that remembers which top-level keys were read."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.read: set[Any] = set()
        for key in NESTED:
            value = dict.get(self, key)
            if isinstance(value, dict):
                dict.__setitem__(self, key, ReadFields(value))

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return dict.get(self, key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(key)
        return dict.__contains__(self, key)

    def pop(self, key: Any, *default: Any) -> Any:
        self.read.add(key)
        return dict.pop(self, key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return dict.setdefault(self, key, default)

    def _all(self) -> None:
        self.read.update(dict.keys(self))

    def __iter__(self) -> Iterator[Any]:
        self._all()
        return dict.__iter__(self)

    def keys(self) -> KeysView[Any]:
        self._all()
        return dict.keys(self)

    def items(self) -> ItemsView[Any, Any]:
        self._all()
        return dict.items(self)

    def values(self) -> ValuesView[Any]:
        self._all()
        return dict.values(self)

    def copy(self) -> dict[str, Any]:
        self._all()
        return dict(dict.items(self))

    def ignored(self) -> list[str]:
        """The fields never read, sorted (at most MAX_REPORTED names of at most 64 characters)."""
        names = [str(k)[:64] for k in dict.keys(self) if k not in self.read and k not in NO_EFFECT]
        for key in NESTED:
            value = dict.get(self, key)
            if key in self.read and isinstance(value, ReadFields):
                names += [f"{key}.{name}" for name in value.ignored()]
        return sorted(names)[:MAX_REPORTED]
