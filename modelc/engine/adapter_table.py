"""AdapterTable: the front's record of the LoRA adapters loaded on one model: a stable id per adapter, the path
it came from, how it was loaded, and llama.cpp's global scales. Pure bookkeeping, no weights and no awaits.

An id names the same adapter for as long as it is loaded: unloading one renumbers no other, loading the same
name again (a replacement) keeps its id, and a new adapter takes the next id never given before (llama-server
numbers its adapters once at start and never unloads one; modelc loads and unloads them while serving, so
the ids clients keep from GET /lora-adapters must not move under them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoadedAdapter:
    adapter_id: int
    name: str
    path: str  # the path it was loaded from (the server shows it relative to --adapters-dir)
    alpha: float  # its loaded alpha multiplier (what a request naming it runs at)
    global_: bool  # loaded with `global` (a replica that restarts loads it the same way)


class AdapterTable:
    """name -> LoadedAdapter in load order, plus the global scales (each adapter's alpha multiplier for the
    requests naming no adapter and giving no `lora`; 0 / absent: not applied to them)."""

    def __init__(self) -> None:
        self._rows: dict[str, LoadedAdapter] = {}
        self._next_id = 0
        self.global_scales: dict[str, float] = {}

    def loaded(self, name: str, path: str, alpha: float = 1.0, global_: bool = False) -> LoadedAdapter:
        """Record a load that succeeded; a name loaded before keeps its id (and its place in load order)."""
        old = self._rows.get(name)
        if old is None:
            adapter_id, self._next_id = self._next_id, self._next_id + 1
        else:
            adapter_id = old.adapter_id
        row = LoadedAdapter(adapter_id, name, str(path), float(alpha), bool(global_))
        self._rows[name] = row
        if global_:  # the one global adapter, at its loaded alpha (Runner.load_adapter does the same)
            self.global_scales = {name: float(alpha)}
        return row

    def unloaded(self, name: str) -> None:
        self._rows.pop(name, None)
        self.global_scales.pop(name, None)

    def scaled(self, scales: dict[str, float]) -> None:
        """Record new global scales (POST /lora-adapters): those not named, or at 0, no longer apply."""
        self.global_scales = {str(n): float(s) for n, s in scales.items() if s != 0}

    @property
    def names(self) -> list[str]:
        return list(self._rows)

    def rows(self) -> list[LoadedAdapter]:
        return list(self._rows.values())

    def describe(self) -> list[tuple[int, str, str, float]]:
        """(id, name, path, global scale) of each loaded adapter, in load order: ServedModel.adapter_table."""
        return [(r.adapter_id, r.name, r.path, self.global_scales.get(r.name, 0.0)) for r in self._rows.values()]
