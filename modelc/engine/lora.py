"""LoRA adapters (PEFT): parse lora_A/lora_B pairs into a LoraAdapter applied as a low-rank side path.

Targets: llama-family q/k/v/o/gate/up/down_proj (HF or GGUF-style names) and GPT-2's
c_attn (split into q/k/v by rows of B), attn.c_proj, mlp.c_fc, mlp.c_proj.

y = W x + scale * B (A x), scale = alpha_multiplier * lora_alpha / r (lora_alpha from
adapter_config.json; without a config, scale = alpha / r). Base weights are never modified,
so unloading restores the base model exactly. No numba here.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from modelc.errors import FormatError, InvalidRequestError
from modelc.formats.safetensors import read_tensors
from modelc.ir import TensorData
from modelc.kernels.reference.ref_linear import dequantize

# base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight (and .default. variants, and GGUF-style blk.N.attn_q)
_KEY = re.compile(
    r"(?:^|\.)layers\.(\d+)\.(?:self_attn|mlp)\.(q|k|v|o|gate|up|down)_proj\.lora_([AB])(?:\.default)?\.weight$"
)
_GGUF_KEY = re.compile(
    r"(?:^|\.)blk\.(\d+)\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.(?:weight\.)?lora_([ab])$"
)
# GPT-2 (Conv1D): transformer.h.N.attn.c_attn (fused q/k/v), attn.c_proj, mlp.c_fc, mlp.c_proj
_GPT2_KEY = re.compile(
    r"(?:^|\.)h\.(\d+)\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.lora_([AB])(?:\.default)?\.weight$"
)
_GPT2_PROJ = {"attn.c_attn": "qkv", "attn.c_proj": "o", "mlp.c_fc": "up", "mlp.c_proj": "down"}
_GGUF_PROJ = {
    "attn_q": "q",
    "attn_k": "k",
    "attn_v": "v",
    "attn_output": "o",
    "ffn_gate": "gate",
    "ffn_up": "up",
    "ffn_down": "down",
}


@dataclass(frozen=True, slots=True)
class LoraAdapter:
    name: str
    rank: int
    scale: float
    pairs: dict[
        tuple[int, str], tuple[np.ndarray, np.ndarray, float]
    ]  # (layer, proj) -> (A (r, in), B (out, r), scale)
    num_skipped: int = 0  # tensors in the file that are not LoRA pairs of a supported projection
    alpha: float = 1.0  # the alpha multiplier the pairs' scales hold (llama.cpp's adapter "scale")
    lora_alpha: float | None = None  # adapter_config.json's, None without one


def rescaled(adapter: LoraAdapter, alpha: float) -> LoraAdapter:
    """The same A/B matrices (shared, not copied) at another alpha multiplier: each pair's scale becomes
    alpha * lora_alpha / r (alpha / r without a config), as load_lora computes it."""
    unit = 1.0 if adapter.lora_alpha is None else float(adapter.lora_alpha)
    pairs = {k: (a, b, float(alpha) * unit / a.shape[0]) for k, (a, b, _) in adapter.pairs.items()}
    return replace(adapter, pairs=pairs, scale=next(iter(pairs.values()))[2], alpha=float(alpha))


def _as_f32(v: Any) -> np.ndarray:
    if isinstance(v, TensorData):
        return dequantize(v).reshape(v.shape).astype(np.float32)
    return np.ascontiguousarray(np.asarray(v, dtype=np.float32))


def _read(path_or_tensors: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensors by name, adapter_config dict) from a PEFT folder, one .safetensors file, or a mapping."""
    if isinstance(path_or_tensors, Mapping):
        return dict(path_or_tensors), {}

    p = pathlib.Path(path_or_tensors)
    config: dict[str, Any] = {}
    if p.is_dir():
        cfg = p / "adapter_config.json"
        if cfg.is_file():
            try:
                config = json.loads(cfg.read_text())
            except (OSError, ValueError) as e:
                raise FormatError(f"{cfg}: not valid JSON ({e})") from None
        p = p / "adapter_model.safetensors"
    if not p.is_file():
        raise FormatError(f"no LoRA adapter at {p}")
    tensors, _ = read_tensors(p)
    return tensors, config


def _split_fused_qkv(name: str, found: dict, shapes: Mapping[tuple[int, str], tuple[int, int]]) -> None:
    """A fused-QKV adapter (GPT-2 c_attn) becomes q/k/v pairs sharing A, with B split by rows."""
    for layer, proj in [k for k in found if k[1] == "qkv"]:
        ab = found.pop((layer, proj))
        if "A" not in ab or "B" not in ab:
            raise FormatError(f"adapter {name}: layer {layer} c_attn has only one of lora_A/lora_B")
        rows = [shapes.get((layer, p), (0, 0))[0] for p in ("q", "k", "v")]
        if ab["B"].shape[0] != sum(rows) or not all(rows):
            raise FormatError(
                f"adapter {name}: layer {layer} c_attn lora_B has {ab['B'].shape[0]} rows, expected {sum(rows)}"
            )
        parts = np.split(ab["B"], np.cumsum(rows)[:-1])
        for p, b in zip(("q", "k", "v"), parts, strict=True):
            found[(layer, p)] = {"A": ab["A"], "B": np.ascontiguousarray(b)}


def load_lora(
    name: str,
    path_or_tensors: Any,
    alpha: float = 1.0,
    *,
    shapes: Mapping[tuple[int, str], tuple[int, int]],
) -> LoraAdapter:
    """Parse an adapter and check every pair against the model's projection shapes {(layer, proj): (out, in)}."""
    tensors, config = _read(path_or_tensors)
    found: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    num_skipped = 0
    for key, val in tensors.items():
        m = _KEY.search(key)
        g = _GGUF_KEY.search(key) if m is None else None
        h = _GPT2_KEY.search(key) if m is None and g is None else None
        if m:
            layer, proj, ab = int(m.group(1)), m.group(2), m.group(3)
        elif g:
            layer, proj, ab = int(g.group(1)), _GGUF_PROJ[g.group(2)], g.group(3).upper()
        elif h:
            layer, proj, ab = int(h.group(1)), _GPT2_PROJ[h.group(2)], h.group(3)
        else:
            num_skipped += 1
            continue
        found.setdefault((layer, proj), {})[ab] = _as_f32(val)
    _split_fused_qkv(name, found, shapes)
    if not found:
        raise FormatError(f"adapter {name}: no lora_A/lora_B weights for q/k/v/o/gate/up/down projections found")
    pairs: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, float]] = {}
    rank = 0
    for key, ab in sorted(found.items()):
        if "A" not in ab or "B" not in ab:
            raise FormatError(f"adapter {name}: layer {key[0]} {key[1]}_proj has only lora_{next(iter(ab))}")
        a_mat, b_mat = ab["A"], ab["B"]
        if key not in shapes:
            raise FormatError(f"adapter {name}: the model has no layer {key[0]} {key[1]}_proj")
        out_dim, in_dim = shapes[key]
        r = a_mat.shape[0]
        if a_mat.shape != (r, in_dim) or b_mat.shape != (out_dim, r):
            raise FormatError(
                f"adapter {name}: layer {key[0]} {key[1]}_proj has A {a_mat.shape}, B {b_mat.shape}; "
                f"expected ({r}, {in_dim}) and ({out_dim}, {r})"
            )
        lora_alpha = config.get("lora_alpha")
        scale = float(alpha) * float(lora_alpha) / r if lora_alpha is not None else float(alpha) / r
        pairs[key] = (a_mat, b_mat, scale)
        rank = max(rank, r)
    if not np.isfinite(alpha):
        raise InvalidRequestError(f"adapter {name}: alpha must be finite", param="alpha")
    lora_alpha = config.get("lora_alpha")
    return LoraAdapter(
        name,
        rank,
        next(iter(pairs.values()))[2],
        pairs,
        num_skipped,
        alpha=float(alpha),
        lora_alpha=None if lora_alpha is None else float(lora_alpha),
    )
