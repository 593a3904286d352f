"""LoraSet: one runner's loaded LoRA adapters, llama.cpp's global scales, and the adapters each request runs
with (`for_params`): its own `lora` mix, else the one it names, else the global ones. Synchronous; no numba,
no model (the Runner passes the projection shapes in and hands the adapters to the forward as LoraRows).
"""

from __future__ import annotations

from typing import Any

from modelc.engine.lora import LoraAdapter, load_lora, rescaled
from modelc.errors import InvalidRequestError, NotFoundError
from modelc.request import SamplingParams

MAX_RESCALED = 64  # adapters kept at the scales requests' `lora` lists asked for (LoraSet._at)


class LoraSet:
    def __init__(self) -> None:
        self.adapters: dict[str, LoraAdapter] = {}
        # the alpha multiplier of each adapter applied to the sequences naming none (llama.cpp's global scales;
        # /lora/load's `global` sets one alone), and those adapters at those multipliers
        self.global_scales: dict[str, float] = {}
        self._global: tuple[LoraAdapter, ...] = ()
        # adapters at the alpha multipliers requests' `lora` lists ask for, built on first use (the A/B matrices
        # shared, not copied); emptied on every load and unload, and when it holds MAX_RESCALED
        self.rescaled: dict[tuple[str, float], LoraAdapter] = {}

    def for_params(self, params: SamplingParams) -> tuple[LoraAdapter, ...]:
        """The adapters a sequence runs with, sorted by name: its `lora` list's at their scales (with the one it
        names at its loaded alpha unless listed), else the one it names, else the global ones."""
        name = params.adapter
        if params.lora is None:
            return self._global if name is None else (self.loaded(name),)
        mix = dict(params.lora)
        if name is not None:
            mix.setdefault(name, self.loaded(name).alpha)
        return tuple(self._at(n, s) for n, s in sorted(mix.items()) if s != 0)

    def loaded(self, name: str) -> LoraAdapter:
        ad = self.adapters.get(name)
        if ad is None:
            raise NotFoundError(f"LoRA adapter {name!r} is not loaded")
        return ad

    def _at(self, name: str, alpha: float) -> LoraAdapter:
        """Adapter `name` at alpha multiplier `alpha`."""
        ad = self.loaded(name)
        if ad.alpha == alpha:
            return ad
        got = self.rescaled.get((name, alpha))
        if got is None:
            if len(self.rescaled) >= MAX_RESCALED:
                self.rescaled.clear()
            got = self.rescaled[(name, alpha)] = rescaled(ad, alpha)
        return got

    def load(
        self, name: str, path_or_tensors: Any, alpha: float, *, global_: bool, shapes: dict[tuple[int, str], Any]
    ) -> dict[str, int]:
        """Load (or replace) adapter `name` checked against the model's projection shapes; with global_=True it
        also applies to requests naming no adapter. Returns {"applied", "skipped", "rank"}."""
        if not name:
            raise InvalidRequestError("adapter name must not be empty", param="name")
        adapter = load_lora(name, path_or_tensors, alpha, shapes=shapes)
        self.adapters[name] = adapter
        self.rescaled.clear()
        if global_:  # the one global adapter, at its loaded alpha
            self.global_scales = {name: float(alpha)}
        self._set_global()
        return {"applied": len(adapter.pairs), "skipped": adapter.num_skipped, "rank": adapter.rank}

    def unload(self, name: str) -> None:
        if self.adapters.pop(name, None) is None:
            raise NotFoundError(f"LoRA adapter {name!r} is not loaded")
        self.rescaled.clear()
        self.global_scales.pop(name, None)
        self._set_global()

    def scale(self, scales: dict[str, float]) -> None:
        """Set the global scales (llama.cpp's POST /lora-adapters): each named adapter's alpha multiplier for the
        sequences naming no adapter; an adapter not named, or at 0, is not applied to them."""
        for name in scales:
            self.loaded(name)
        self.global_scales = {name: float(s) for name, s in scales.items() if s != 0}
        self._set_global()

    def _set_global(self) -> None:
        self._global = tuple(self._at(name, s) for name, s in self.global_scales.items() if name in self.adapters)
