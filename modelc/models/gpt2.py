"""GPT-2: LayerNorm, learned positions, fused c_attn (split into Q/K/V at load), GELU (tanh), tied head.

HF Conv1D weights are stored (in, out): transposed once at load. GGUF gpt2 is already (out, in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.artifact.structure import GPT2_NAMES
from modelc.cache.kv_pages import KVPages
from modelc.errors import FormatError, UnsupportedError
from modelc.ir import SCALE_SUFFIX
from modelc.kernels.matmul.linear import Weight, prepare_weight
from modelc.kernels.select import KernelSet
from modelc.models.batch import ForwardBatch, LoraRows
from modelc.models.llama import apply_lora
from modelc.models.scratch import Scratch
from modelc.models.weights import WeightReader, split_rows


@dataclass(frozen=True, slots=True)
class Gpt2Args:
    vocab_size: int
    hidden_size: int  # C
    intermediate_size: int  # F
    num_layers: int
    num_heads: int  # H (= K: no GQA)
    max_positions: int
    layer_norm_eps: float
    exact_gelu: bool

    @classmethod
    def from_config(cls, cfg: dict[str, Any], naming: str) -> Gpt2Args:
        try:
            C = int(cfg["hidden_size"])
            return cls(
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=C,
                intermediate_size=int(cfg.get("intermediate_size") or 4 * C),
                num_layers=int(cfg["num_hidden_layers"]),
                num_heads=int(cfg["num_attention_heads"]),
                max_positions=int(cfg.get("max_position_embeddings") or 1024),
                layer_norm_eps=float(cfg.get("layer_norm_eps") or 1e-5),
                # GPT-2 uses the tanh GELU ("gelu_new"); GGUF files say "gelu" for it, so only an
                # HF config asking for plain "gelu" gets the exact erf form.
                exact_gelu=naming == "hf" and cfg.get("hidden_act") == "gelu",
            )
        except KeyError as e:
            raise FormatError(f"model config lacks {e.args[0]}") from None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass(slots=True)
class Gpt2Layer:
    ln1_w: np.ndarray  # (C,)
    ln1_b: np.ndarray
    q: Weight  # (C, C)
    k: Weight
    v: Weight
    qkv_b: np.ndarray  # (3C,)
    o: Weight  # (C, C)
    o_b: np.ndarray
    ln2_w: np.ndarray
    ln2_b: np.ndarray
    up: Weight  # (F, C)
    up_b: np.ndarray
    down: Weight  # (C, F)
    down_b: np.ndarray


_HF = GPT2_NAMES["hf"]
_GGUF = GPT2_NAMES["gguf"]


def _hf_names(source: Any) -> dict[str, str]:
    """HF GPT-2 checkpoints name tensors with or without the "transformer." prefix."""
    if "transformer.wte.weight" in source.tensors:
        return _HF
    return {k: v.removeprefix("transformer.") for k, v in _HF.items()}


class Gpt2Model:
    """Weights + a batched forward. Not thread-safe: one forward at a time."""

    def __init__(self, source: Any, kernels: KernelSet):
        naming = getattr(source, "naming", "hf") or "hf"
        if naming not in ("hf", "gguf"):
            raise UnsupportedError(f"unknown tensor naming {naming!r}")
        self.args = a = Gpt2Args.from_config(dict(source.config), naming)
        self.kernels = kernels
        self.names = names = _hf_names(source) if naming == "hf" else _GGUF
        w = WeightReader(source, kernels)
        self.conv1d = naming == "hf"
        self.wte = w.tensor(names["wte"])  # (V, C)
        self.wte_rscale = w.tensors.get(names["wte"] + SCALE_SUFFIX)  # (V,) I8/I4 per-row scales, else None
        self.wpe = w.vector(names["wpe"]).reshape(-1, a.hidden_size)  # (max_pos, C) f32
        self.layers = [self._load_layer(w, i) for i in range(a.num_layers)]
        self.ln_f = (
            w.vector(names["ln_f"] + ".weight", a.hidden_size),
            w.vector(names["ln_f"] + ".bias", a.hidden_size),
        )
        lm = names["lm_head"] if w.has(names["lm_head"]) else names["wte"]
        self.lm_head = w.matrix(lm, a.vocab_size, a.hidden_size)
        C, F = a.hidden_size, a.intermediate_size
        self.scratch = Scratch({"x": C, "h": C, "q": C, "k": C, "v": C, "attn": C, "o": C, "up": F, "act": F})

    def _mat(self, w: WeightReader, name: str, rows: int, cols: int) -> Weight:
        if self.conv1d:
            return prepare_weight(w.transposed_matrix(name, rows, cols))
        return w.matrix(name, rows, cols)

    def _load_layer(self, w: WeightReader, i: int) -> Gpt2Layer:
        n = {k: v.format(i=i) for k, v in self.names.items()}
        C, F = self.args.hidden_size, self.args.intermediate_size
        qkv_t = w.transposed_matrix(n["qkv"] + ".weight", 3 * C, C) if self.conv1d else w.tensor(n["qkv"] + ".weight")
        if qkv_t.shape != (3 * C, C):
            raise FormatError(f"tensor {n['qkv']}.weight has shape {qkv_t.shape}, expected ({3 * C}, {C})")
        q, k, v = (prepare_weight(t) for t in split_rows(qkv_t, [C, C, C], n["qkv"]))
        return Gpt2Layer(
            ln1_w=w.vector(n["ln1"] + ".weight", C),
            ln1_b=w.vector(n["ln1"] + ".bias", C),
            q=q,
            k=k,
            v=v,
            qkv_b=w.vector(n["qkv"] + ".bias", 3 * C),
            o=self._mat(w, n["o"] + ".weight", C, C),
            o_b=w.vector(n["o"] + ".bias", C),
            ln2_w=w.vector(n["ln2"] + ".weight", C),
            ln2_b=w.vector(n["ln2"] + ".bias", C),
            up=self._mat(w, n["up"] + ".weight", F, C),
            up_b=w.vector(n["up"] + ".bias", F),
            down=self._mat(w, n["down"] + ".weight", C, F),
            down_b=w.vector(n["down"] + ".bias", C),
        )

    @property
    def hidden_size(self) -> int:
        return self.args.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size

    def projection_shapes(self) -> dict[tuple[int, str], tuple[int, int]]:
        """{(layer, proj): (out, in)} of every projection a LoRA adapter may target."""
        return {
            (i, p): getattr(L, p).shape for i, L in enumerate(self.layers) for p in ("q", "k", "v", "o", "up", "down")
        }

    @property
    def max_positions(self) -> int:
        """Learned position table length: the longest sequence this model can run."""
        return self.args.max_positions

    def kv_shape(self) -> tuple[int, int, int]:
        return self.args.num_layers, self.args.num_heads, self.args.head_dim

    def _lin(self, out: np.ndarray, x: np.ndarray, w: Weight, b: np.ndarray, lora: tuple[LoraRows, ...], key):
        self.kernels.matmul(out, x, w)
        out += b
        if lora:
            apply_lora(out, x, lora, key)

    def forward(self, batch: ForwardBatch, kv: KVPages, *, output: str = "logits") -> np.ndarray:
        """Same contract as LlamaModel.forward."""
        a, K, sc = self.args, self.kernels, self.scratch
        T, lora, C, H, D = batch.num_tokens, batch.lora, a.hidden_size, a.num_heads, a.head_dim
        if T and int(batch.positions.max()) >= a.max_positions:
            raise UnsupportedError(f"position {int(batch.positions.max())} is past GPT-2's {a.max_positions} positions")
        sc.reserve(T)
        x, h, o = sc.get("x", T), sc.get("h", T), sc.get("o", T)  # (T, C)
        q, k, v, attn = sc.get("q", T), sc.get("k", T), sc.get("v", T), sc.get("attn", T)  # (T, C)
        up, act = sc.get("up", T), sc.get("act", T)  # (T, F)
        q3, k3, v3, attn3 = (t.reshape(T, H, D) for t in (q, k, v, attn))  # (T, H, D)
        x[...] = K.dequantize_rows(self.wte, batch.token_ids, self.wte_rscale)
        x += self.wpe[batch.positions]
        scale = 1.0 / float(np.sqrt(D))
        for i, L in enumerate(self.layers):
            K.layer_norm(h, x, L.ln1_w, L.ln1_b, a.layer_norm_eps)
            self._lin(q, h, L.q, L.qkv_b[:C], lora, (i, "q"))
            self._lin(k, h, L.k, L.qkv_b[C : 2 * C], lora, (i, "k"))
            self._lin(v, h, L.v, L.qkv_b[2 * C :], lora, (i, "v"))
            kp, vp = kv.layer(i)
            K.kv_write(kp, vp, k3, v3, batch.slots)
            K.paged_attention(attn3, q3, kp, vp, batch.block_tables, batch.q_start, batch.pos_start, scale, 0)
            self._lin(o, attn, L.o, L.o_b, lora, (i, "o"))
            x += o
            K.layer_norm(h, x, L.ln2_w, L.ln2_b, a.layer_norm_eps)
            self._lin(up, h, L.up, L.up_b, lora, (i, "up"))
            (K.gelu_erf if a.exact_gelu else K.gelu)(act, up)  # not in place: aliasing defeats vectorization
            self._lin(o, act, L.down, L.down_b, lora, (i, "down"))
            x += o
        return self._head(x, batch, output)

    def _head(self, x: np.ndarray, batch: ForwardBatch, output: str) -> np.ndarray:
        a, K = self.args, self.kernels
        w, b = self.ln_f
        if output == "hidden":
            hid = np.empty_like(x)
            K.layer_norm(hid, x, w, b, a.layer_norm_eps)
            return hid
        rows = x if batch.logit_rows is None else np.ascontiguousarray(x[batch.logit_rows])  # (R, C)
        hn = np.empty_like(rows)
        K.layer_norm(hn, rows, w, b, a.layer_norm_eps)
        logits = np.empty((rows.shape[0], a.vocab_size), np.float32)  # (R, V)
        K.matmul(logits, hn, self.lm_head)
        return logits
