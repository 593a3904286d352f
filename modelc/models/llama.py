"""The LLaMA family (LLaMA 2/3, Mistral, Qwen2 with QKV bias, Phi-3 with fused QKV / gate_up) on paged KV.

Args come from the normalized config once; weight names ("hf" or "gguf") and fused
tensors are resolved at load; `forward` is one batched pass over a flat token list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.cache.kv_pages import KVPages
from modelc.errors import FormatError, UnsupportedError
from modelc.kernels.linear import Weight
from modelc.kernels.rope import rope_inv_freq
from modelc.kernels.select import KernelSet
from modelc.models.batch import ForwardBatch, LoraRows
from modelc.models.scratch import Scratch
from modelc.models.weights import WeightReader


@dataclass(frozen=True, slots=True)
class LlamaArgs:
    vocab_size: int
    hidden_size: int  # C
    intermediate_size: int  # F
    num_layers: int
    num_heads: int  # H
    num_kv_heads: int  # K
    head_dim: int  # D
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    rope_neox: bool
    sliding_window: int
    layer_windows: tuple[int, ...]  # per layer: sliding_window, or 0 where the layer attends to everything
    rotary_dim: int  # R <= D: only the first R dims of each head rotate (Phi-4-mini style partial rotary)

    @classmethod
    def from_config(cls, cfg: dict[str, Any], naming: str, architecture: str) -> LlamaArgs:
        try:
            C = int(cfg["hidden_size"])
            H = int(cfg["num_attention_heads"])
            D = int(cfg.get("head_dim") or C // H)
            # GGUF: rope.dimension_count; HF: int(head_dim * partial_rotary_factor), as transformers does
            R = int(cfg.get("rotary_dim") or D * float(cfg.get("partial_rotary_factor") or 1.0))
            L, win = int(cfg["num_hidden_layers"]), int(cfg.get("sliding_window") or 0)
            slides = cfg.get("sliding_window_layers") or [True] * L  # Qwen2: only some layers slide
            if len(slides) != L:
                raise FormatError(f"sliding_window_layers has {len(slides)} entries for {L} layers")
            args = cls(
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=C,
                intermediate_size=int(cfg["intermediate_size"]),
                num_layers=L,
                num_heads=H,
                num_kv_heads=int(cfg.get("num_key_value_heads") or H),
                head_dim=D,
                rms_norm_eps=float(cfg.get("rms_norm_eps") or 1e-6),
                rope_theta=float(cfg.get("rope_theta") or 10000.0),
                rope_scaling=cfg.get("rope_scaling") or None,
                rope_neox=bool(cfg.get("rope_neox", naming == "hf" or architecture in ("qwen2", "phi3"))),
                sliding_window=win,
                layer_windows=tuple(win if s else 0 for s in slides),
                rotary_dim=R,
            )
        except KeyError as e:
            raise FormatError(f"model config lacks {e.args[0]}") from None
        if args.num_heads % args.num_kv_heads:
            raise FormatError(f"num_attention_heads {H} is not a multiple of num_key_value_heads {args.num_kv_heads}")
        if not (0 < R <= D and R % 2 == 0):
            raise FormatError(f"rotary dimension {R} must be even and in 1..head_dim {D}")
        act = cfg.get("hidden_act") or "silu"
        if act not in ("silu", "swish"):  # the MLP is SwiGLU: another activation would be silently wrong
            raise UnsupportedError(f"hidden_act {act!r} is not supported for {architecture} (only silu)")
        return args


@dataclass(slots=True)
class LlamaLayer:
    attn_norm: np.ndarray  # (C,)
    q: Weight  # (H*D, C)
    k: Weight  # (K*D, C)
    v: Weight
    o: Weight  # (C, H*D)
    q_bias: np.ndarray | None
    k_bias: np.ndarray | None
    v_bias: np.ndarray | None
    ffn_norm: np.ndarray
    gate: Weight  # (F, C)
    up: Weight
    down: Weight  # (C, F)
    o_bias: np.ndarray | None = None  # (C,) HF llama attention_bias=True biases o_proj too
    gate_bias: np.ndarray | None = None  # (F,) HF llama mlp_bias=True
    up_bias: np.ndarray | None = None
    down_bias: np.ndarray | None = None  # (C,)


_HF = {
    "embed": "model.embed_tokens.weight",
    "norm": "model.norm.weight",
    "lm_head": "lm_head.weight",
    "attn_norm": "model.layers.{i}.input_layernorm.weight",
    "ffn_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "q": "model.layers.{i}.self_attn.q_proj",
    "k": "model.layers.{i}.self_attn.k_proj",
    "v": "model.layers.{i}.self_attn.v_proj",
    "o": "model.layers.{i}.self_attn.o_proj",
    "qkv": "model.layers.{i}.self_attn.qkv_proj",
    "gate": "model.layers.{i}.mlp.gate_proj",
    "up": "model.layers.{i}.mlp.up_proj",
    "down": "model.layers.{i}.mlp.down_proj",
    "gate_up": "model.layers.{i}.mlp.gate_up_proj",
}
_GGUF = {
    "embed": "token_embd.weight",
    "norm": "output_norm.weight",
    "lm_head": "output.weight",
    "attn_norm": "blk.{i}.attn_norm.weight",
    "ffn_norm": "blk.{i}.ffn_norm.weight",
    "q": "blk.{i}.attn_q",
    "k": "blk.{i}.attn_k",
    "v": "blk.{i}.attn_v",
    "o": "blk.{i}.attn_output",
    "qkv": "blk.{i}.attn_qkv",
    "gate": "blk.{i}.ffn_gate",
    "up": "blk.{i}.ffn_up",
    "down": "blk.{i}.ffn_down",
    "gate_up": "blk.{i}.ffn_up",  # GGUF phi3 stores gate and up fused in ffn_up (2F rows)
}
NAMES = {"hf": _HF, "gguf": _GGUF}
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")


def _load_layer(w: WeightReader, names: dict[str, str], a: LlamaArgs, i: int) -> LlamaLayer:
    n = {k: v.format(i=i) for k, v in names.items()}
    C, F, qd, kd = a.hidden_size, a.intermediate_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    if w.has(n["q"] + ".weight"):
        q, k, v = (w.matrix(n[p] + ".weight", r, C) for p, r in (("q", qd), ("k", kd), ("v", kd)))
        qb, kb, vb = (w.maybe_vector(n[p] + ".bias", r) for p, r in (("q", qd), ("k", kd), ("v", kd)))
    elif w.has(n["qkv"] + ".weight"):
        q, k, v = w.split_matrix(n["qkv"] + ".weight", [qd, kd, kd], C)
        qkv_b = n["qkv"] + ".bias"
        qb, kb, vb = w.split_vector(qkv_b, [qd, kd, kd]) if w.has(qkv_b) else (None, None, None)
    else:
        raise FormatError(f"model {w.name} has no attention weights for layer {i} ({n['q']}.weight)")
    if w.has(n["gate"] + ".weight"):
        gate, up = w.matrix(n["gate"] + ".weight", F, C), w.matrix(n["up"] + ".weight", F, C)
        gb, ub = w.maybe_vector(n["gate"] + ".bias", F), w.maybe_vector(n["up"] + ".bias", F)
    else:
        gate, up = w.split_matrix(n["gate_up"] + ".weight", [F, F], C)
        gu_b = n["gate_up"] + ".bias"
        gb, ub = w.split_vector(gu_b, [F, F]) if w.has(gu_b) else (None, None)
    return LlamaLayer(
        attn_norm=w.vector(n["attn_norm"], C), q=q, k=k, v=v, o=w.matrix(n["o"] + ".weight", C, qd),
        q_bias=qb, k_bias=kb, v_bias=vb, ffn_norm=w.vector(n["ffn_norm"], C),
        gate=gate, up=up, down=w.matrix(n["down"] + ".weight", C, F),
        o_bias=w.maybe_vector(n["o"] + ".bias", C), gate_bias=gb, up_bias=ub,
        down_bias=w.maybe_vector(n["down"] + ".bias", C),
    )  # fmt: skip


def apply_lora(out: np.ndarray, x: np.ndarray, lora: tuple[LoraRows, ...], key: tuple[int, str]) -> None:
    """out[rows] += scale * (x[rows] @ A.T) @ B.T for each adapter group that adapts `key`."""
    for group in lora:
        ab = group.adapter.pairs.get(key)  # type: ignore[attr-defined]
        if ab is None:
            continue
        a_mat, b_mat, scale = ab
        rows = group.rows
        out[rows] += ((x[rows] @ a_mat.T) @ b_mat.T) * np.float32(scale)


class LlamaModel:
    """Weights + a batched forward. Not thread-safe: one forward at a time (its Scratch is shared)."""

    def __init__(self, source: Any, kernels: KernelSet):
        naming = getattr(source, "naming", "hf") or "hf"
        if naming not in NAMES:
            raise UnsupportedError(f"unknown tensor naming {naming!r}")
        self.args = a = LlamaArgs.from_config(dict(source.config), naming, source.architecture)
        self.kernels = kernels
        names = NAMES[naming]
        w = WeightReader(source, kernels)
        self.embed = w.tensor(names["embed"])  # (V, C) stored dtype, rows looked up per forward
        self.layers = [_load_layer(w, names, a, i) for i in range(a.num_layers)]
        self.norm = w.vector(names["norm"], a.hidden_size)
        lm = names["lm_head"] if w.has(names["lm_head"]) else names["embed"]
        self.lm_head = w.matrix(lm, a.vocab_size, a.hidden_size)
        inv = rope_inv_freq(a.rotary_dim, a.rope_theta, a.rope_scaling)  # (R/2,)
        freqs = source.config.get("rope_freqs_tensor")
        if freqs:  # llama3 GGUF: per-dim frequency divisors
            inv = inv / w.vector(freqs, a.rotary_dim // 2).astype(np.float64)
        self.inv_freq = np.ascontiguousarray(inv)  # (R/2,) float64
        qd, kd = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
        self.scratch = Scratch(
            {
                "x": a.hidden_size,
                "h": a.hidden_size,
                "q": qd,
                "k": kd,
                "v": kd,
                "attn": qd,
                "o": a.hidden_size,
                "gate": a.intermediate_size,
                "up": a.intermediate_size,
                "act": a.intermediate_size,
            }
        )

    @property
    def hidden_size(self) -> int:
        return self.args.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size

    def projection_shapes(self) -> dict[tuple[int, str], tuple[int, int]]:
        """{(layer, proj): (out, in)} of every projection a LoRA adapter may target."""
        return {(i, p): getattr(L, p).shape for i, L in enumerate(self.layers) for p in PROJECTIONS}

    def kv_shape(self) -> tuple[int, int, int]:
        """(num_layers, num_kv_heads, head_dim) for sizing KVPages."""
        return self.args.num_layers, self.args.num_kv_heads, self.args.head_dim

    def _lin(self, out: np.ndarray, x: np.ndarray, w: Weight, lora: tuple[LoraRows, ...], key: tuple[int, str]):
        self.kernels.matmul(out, x, w)
        if lora:
            apply_lora(out, x, lora, key)

    def forward(self, batch: ForwardBatch, kv: KVPages, *, output: str = "logits") -> np.ndarray:
        """One pass over batch's tokens, writing their K/V to `kv`.

        output="logits": (R, V) logits for batch.logit_rows (every row when None).
        output="hidden": (T, C) final hidden states after the last norm.
        """
        a, K, sc = self.args, self.kernels, self.scratch
        T, lora = batch.num_tokens, batch.lora
        sc.reserve(T)
        x, h, o = sc.get("x", T), sc.get("h", T), sc.get("o", T)  # (T, C)
        q, k, v, attn = sc.get("q", T), sc.get("k", T), sc.get("v", T), sc.get("attn", T)
        gate, up, act = sc.get("gate", T), sc.get("up", T), sc.get("act", T)  # (T, F)
        q3 = q.reshape(T, a.num_heads, a.head_dim)  # (T, H, D)
        k3 = k.reshape(T, a.num_kv_heads, a.head_dim)  # (T, K, D)
        v3 = v.reshape(T, a.num_kv_heads, a.head_dim)
        attn3 = attn.reshape(T, a.num_heads, a.head_dim)
        x[...] = K.dequantize_rows(self.embed, batch.token_ids)  # (T, C)
        scale = 1.0 / float(np.sqrt(a.head_dim))
        for i, L in enumerate(self.layers):
            if i == 0:
                K.rms_norm(h, x, L.attn_norm, a.rms_norm_eps)
            else:
                K.add_rms_norm(h, x, o, L.attn_norm, a.rms_norm_eps)  # x += previous FFN output
            self._lin(q, h, L.q, lora, (i, "q"))
            self._lin(k, h, L.k, lora, (i, "k"))
            self._lin(v, h, L.v, lora, (i, "v"))
            if L.q_bias is not None:
                q += L.q_bias
                k += L.k_bias
                v += L.v_bias
            K.rope(q3, batch.positions, self.inv_freq, a.rope_neox)
            K.rope(k3, batch.positions, self.inv_freq, a.rope_neox)
            kp, vp = kv.layer(i)
            K.kv_write(kp, vp, k3, v3, batch.slots)
            K.paged_attention(
                attn3, q3, kp, vp, batch.block_tables, batch.q_start, batch.pos_start, scale, a.layer_windows[i]
            )
            self._lin(o, attn, L.o, lora, (i, "o"))
            if L.o_bias is not None:
                o += L.o_bias
            K.add_rms_norm(h, x, o, L.ffn_norm, a.rms_norm_eps)  # x += attention output
            self._lin(gate, h, L.gate, lora, (i, "gate"))
            self._lin(up, h, L.up, lora, (i, "up"))
            if L.gate_bias is not None:
                gate += L.gate_bias
            if L.up_bias is not None:
                up += L.up_bias
            K.silu_mul(act, gate, up)  # not in place: aliased operands defeat vectorization
            self._lin(o, act, L.down, lora, (i, "down"))
            if L.down_bias is not None:
                o += L.down_bias
        x += o
        return self._head(x, batch, output)

    def _head(self, x: np.ndarray, batch: ForwardBatch, output: str) -> np.ndarray:
        a, K = self.args, self.kernels
        if output == "hidden":
            hid = np.empty_like(x)  # (T, C)
            K.rms_norm(hid, x, self.norm, a.rms_norm_eps)
            return hid
        rows = x if batch.logit_rows is None else np.ascontiguousarray(x[batch.logit_rows])  # (R, C)
        hn = np.empty_like(rows)
        K.rms_norm(hn, rows, self.norm, a.rms_norm_eps)
        logits = np.empty((rows.shape[0], a.vocab_size), np.float32)  # (R, V)
        K.matmul(logits, hn, self.lm_head)
        return logits
