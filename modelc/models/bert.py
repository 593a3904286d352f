"""BERT-family encoders (BERT, RoBERTa/XLM-R position ids, MiniLM / sentence-transformers) for embeddings.

Owns the config read, the HF weight-name map (with or without a `bert.`/`roberta.` prefix;
llama.cpp's GGUF names are renamed to it),
the padded, batched encoder forward with an attention mask, and pooling (mean / cls / max,
optional L2 normalization). Weights are laid out once at load: fused QKV, transposed f32 for
BLAS, or a kernels.matmul.linear Weight for quantized tensors. Batching policy lives in engine/embedder.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.errors import FormatError, InvalidRequestError, UnsupportedError
from modelc.ir import SCALE_SUFFIX, TensorData
from modelc.kernels.elementwise import encoder
from modelc.kernels.reference import ref_encoder
from modelc.kernels.select import KernelSet, kernel_set
from modelc.models.bounds import check_counts
from modelc.models.mlp import Linear

PREFIXES = ("", "bert.", "roberta.", "xlm_roberta.", "model.", "encoder_model.")
ROBERTA_TYPES = ("roberta", "xlm-roberta", "xlm_roberta", "camembert")
POOLINGS = ("mean", "cls", "max", "last")


@dataclass(frozen=True, slots=True)
class BertConfig:
    vocab_size: int
    hidden_size: int  # C
    num_hidden_layers: int
    num_attention_heads: int  # H
    intermediate_size: int  # F
    layer_norm_eps: float
    max_position_embeddings: int
    pad_token_id: int
    position_offset: int  # RoBERTa: positions start at padding_idx + 1; BERT: 0
    pooling: str  # "mean" | "cls" | "max" | "last" (last real token)
    normalize: bool
    max_seq_length: int  # longest input in tokens (special tokens included)
    hidden_act: str

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def pooling_of(config: dict[str, Any], metadata: dict[str, Any]) -> tuple[str, bool]:
    """(mode, normalize) from config["pooling"] (a string or a dict), else mean + normalize.

    The dict may be sentence-transformers' 1_Pooling/config.json (pooling_mode_*_tokens keys)
    or {"mode": ..., "normalize": ...}. Missing => mean + normalize, sentence-transformers' usual
    stack, and what the Runner's embed() does for decoders.
    """
    p = config.get("pooling", metadata.get("pooling"))
    if p is None:
        return "mean", True
    if isinstance(p, str):
        mode, normalize = p, bool(config.get("normalize", True))
    elif isinstance(p, dict):
        mode = p.get("mode") or p.get("pooling_mode")
        if mode is None:
            for name in ("cls", "mean", "max"):
                if p.get(f"pooling_mode_{name}_token") or p.get(f"pooling_mode_{name}_tokens"):
                    mode = name
                    break
            if mode is None and p.get("pooling_mode_lasttoken"):
                mode = "last"
        normalize = bool(p.get("normalize", config.get("normalize", True)))
    else:
        raise FormatError(f"config pooling must be a string or an object, got {type(p).__name__}")
    mode = {"mean_tokens": "mean", "cls_token": "cls", "max_tokens": "max"}.get(mode or "mean", mode or "mean")
    if mode not in POOLINGS:
        raise UnsupportedError(f"pooling mode {mode!r} is not supported (supported: {', '.join(POOLINGS)})")
    return mode, normalize


# llama.cpp's GGUF names for BERT -> the HF names this module reads (per layer: blk.N. -> encoder.layer.N.).
_GGUF_GLOBAL = {
    "token_embd.weight": "embeddings.word_embeddings.weight",
    "position_embd.weight": "embeddings.position_embeddings.weight",
    "token_types.weight": "embeddings.token_type_embeddings.weight",
    "token_embd_norm.weight": "embeddings.LayerNorm.weight",
    "token_embd_norm.bias": "embeddings.LayerNorm.bias",
}
_GGUF_LAYER = {
    "attn_q": "attention.self.query",
    "attn_k": "attention.self.key",
    "attn_v": "attention.self.value",
    "attn_output": "attention.output.dense",
    "attn_output_norm": "attention.output.LayerNorm",
    "ffn_up": "intermediate.dense",
    "ffn_down": "output.dense",
    "layer_output_norm": "output.LayerNorm",
}


def hf_names(tensors: dict[str, TensorData]) -> dict[str, TensorData]:
    """The tensors under HF BERT names: GGUF (llama.cpp) names are renamed, anything else is kept."""
    if "token_embd.weight" not in tensors:
        return tensors
    out: dict[str, TensorData] = {}
    for name, t in tensors.items():
        if name in _GGUF_GLOBAL:
            out[_GGUF_GLOBAL[name]] = t
            continue
        parts = name.split(".")  # blk.N.attn_q.weight[@scale]
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in _GGUF_LAYER:
            out[f"encoder.layer.{parts[1]}.{_GGUF_LAYER[parts[2]]}.{parts[3]}"] = t
        else:
            out[name] = t
    return out


def _weight_prefix(tensors: dict[str, TensorData]) -> str:
    for p in PREFIXES:
        if f"{p}embeddings.word_embeddings.weight" in tensors:
            return p
    raise FormatError("no BERT word embeddings found (expected embeddings.word_embeddings.weight, maybe under bert.)")


def read_config(source: Any) -> BertConfig:
    cfg = dict(source.config)
    tensors = hf_names(source.tensors)
    prefix = _weight_prefix(tensors)
    V, C = tensors[f"{prefix}embeddings.word_embeddings.weight"].shape
    pos = tensors.get(f"{prefix}embeddings.position_embeddings.weight")
    if pos is None:
        raise UnsupportedError("BERT model without absolute position embeddings is not supported")
    num_layers = cfg.get("num_hidden_layers")
    if num_layers is None:
        num_layers = sum(
            1
            for n in tensors
            if n.startswith(f"{prefix}encoder.layer.") and n.endswith(".output.dense.weight") and ".attention." not in n
        )
    heads = cfg.get("num_attention_heads")
    if not heads:
        raise FormatError("BERT config has no num_attention_heads")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedError(f"position_embedding_type {cfg['position_embedding_type']!r} is not supported")
    roberta = str(cfg.get("model_type", "")).lower() in ROBERTA_TYPES or prefix in ("roberta.", "xlm_roberta.")
    pad = int(cfg.get("pad_token_id", 1 if roberta else 0) or 0)
    offset = pad + 1 if roberta else 0
    max_pos = int(pos.shape[0])
    mode, normalize = pooling_of(cfg, dict(source.metadata))
    max_seq = int(cfg.get("max_seq_length") or source.metadata.get("max_seq_length") or max_pos - offset)
    act = str(cfg.get("hidden_act", "gelu"))
    if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu"):
        raise UnsupportedError(f"BERT hidden_act {act!r} is not supported")
    return BertConfig(
        vocab_size=int(V),
        hidden_size=int(C),
        num_hidden_layers=int(num_layers),
        num_attention_heads=int(heads),
        intermediate_size=int(tensors[f"{prefix}encoder.layer.0.intermediate.dense.weight"].shape[0]),
        layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
        max_position_embeddings=max_pos,
        pad_token_id=pad,
        position_offset=offset,
        pooling=mode,
        normalize=normalize,
        max_seq_length=min(max_seq, max_pos - offset),
        hidden_act=act,
    )


@dataclass(slots=True)
class Layer:
    qkv: Linear
    out: Linear
    ln1: tuple[np.ndarray, np.ndarray]
    up: Linear
    down: Linear
    ln2: tuple[np.ndarray, np.ndarray]


class BertModel:
    """Encoder forward over padded batches: `encode(ids (S, T), mask (S, T)) -> (S, T, C)`, `embed(...) -> (S, C)`."""

    def __init__(self, source: Any, kernels: KernelSet | None = None) -> None:
        check_counts(source)  # config counts against the tensors present, before anything is allocated
        self.ks = kernels or kernel_set()
        self._gelu_erf = ref_encoder.gelu_erf if self.ks.name == "ref" else encoder.gelu_erf
        self.cfg = read_config(source)
        self.name = getattr(source, "name", "bert")
        self._tensors = hf_names(source.tensors)
        p = _weight_prefix(self._tensors)
        self.word = self._t(f"{p}embeddings.word_embeddings.weight")
        self.word_scale = self._tensors.get(f"{p}embeddings.word_embeddings.weight{SCALE_SUFFIX}")
        self.pos = self._table(f"{p}embeddings.position_embeddings.weight")  # (max_pos, C)
        C = self.cfg.hidden_size
        tt = f"{p}embeddings.token_type_embeddings.weight"
        self.types = self._table(tt) if tt in self._tensors else np.zeros((1, C), np.float32)  # (num types, C)
        self.type0 = self.types[0]  # (C,)
        self.emb_ln = self._ln(f"{p}embeddings.LayerNorm")
        self.layers = [self._layer(f"{p}encoder.layer.{i}.") for i in range(self.cfg.num_hidden_layers)]
        del self._tensors

    def _t(self, name: str) -> TensorData:
        t = self._tensors.get(name)
        if t is None:
            raise FormatError(f"model {self.name} has no tensor {name}")
        return t

    def _table(self, name: str) -> np.ndarray:
        """A small table (positions, token types) as f32, with its @scale if it was quantized at pack time."""
        return self.ks.dequantize(self._t(name), self._tensors.get(name + SCALE_SUFFIX))

    def _vec(self, name: str) -> np.ndarray:
        return self.ks.dequantize(self._t(name)).reshape(-1).astype(np.float32)

    def _ln(self, base: str) -> tuple[np.ndarray, np.ndarray]:
        if f"{base}.weight" in self._tensors:
            return self._vec(f"{base}.weight"), self._vec(f"{base}.bias")
        return self._vec(f"{base}.gamma"), self._vec(f"{base}.beta")  # old TF-converted checkpoints

    def _linear(self, names: list[str]) -> Linear:
        ts = [self._t(f"{n}.weight") for n in names]
        scales = [self._tensors.get(f"{n}.weight{SCALE_SUFFIX}") for n in names]
        biases = [self._vec(f"{n}.bias") if f"{n}.bias" in self._tensors else None for n in names]
        bias = (
            None
            if all(b is None for b in biases)
            else np.concatenate(
                [b if b is not None else np.zeros(t.shape[0], np.float32) for b, t in zip(biases, ts, strict=True)]
            )
        )
        return Linear(self.ks, ts, scales, bias)

    def _layer(self, p: str) -> Layer:
        a = f"{p}attention."
        return Layer(
            qkv=self._linear([f"{a}self.query", f"{a}self.key", f"{a}self.value"]),
            out=self._linear([f"{a}output.dense"]),
            ln1=self._ln(f"{a}output.LayerNorm"),
            up=self._linear([f"{p}intermediate.dense"]),
            down=self._linear([f"{p}output.dense"]),
            ln2=self._ln(f"{p}output.LayerNorm"),
        )

    def _layer_norm(self, x: np.ndarray, wb: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        out = np.empty_like(x)
        self.ks.layer_norm(out, x, wb[0], wb[1], self.cfg.layer_norm_eps)
        return out

    def _act(self, x: np.ndarray) -> np.ndarray:
        act = self.cfg.hidden_act
        if act == "relu":
            return np.maximum(x, 0.0, out=x)
        out = np.empty_like(x)
        if act == "gelu":  # flat kernel: vectorized rational erf (kernels/elementwise/encoder.py)
            self._gelu_erf(out.reshape(-1), x.reshape(-1))
        else:
            self.ks.gelu(out, x)
        return out

    def embeddings(self, ids: np.ndarray, mask: np.ndarray, type_ids: np.ndarray | None = None) -> np.ndarray:
        """(S, T) ids and 0/1 mask (and segment ids for pairs, else all 0) -> (S*T, C) normalized input embeddings."""
        cfg = self.cfg
        S, T = ids.shape
        if T > cfg.max_position_embeddings - cfg.position_offset:
            raise InvalidRequestError(f"input of {T} tokens is longer than the model's {cfg.max_seq_length}")
        if ids.size and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
            raise InvalidRequestError(f"token id out of range [0, {cfg.vocab_size})")
        if cfg.position_offset:
            # RoBERTa: real tokens count from padding_idx + 1, padding sits at padding_idx.
            pos = np.cumsum(mask, axis=1) * mask + cfg.pad_token_id  # (S, T)
        else:
            pos = np.broadcast_to(np.arange(T), (S, T))
        flat = ids.reshape(-1)
        x = self.ks.dequantize_rows(self.word, flat, self.word_scale).astype(np.float32, copy=False)  # (S*T, C)
        if type_ids is None:
            x = x + self.pos[pos.reshape(-1)] + self.type0
        else:
            if type_ids.size and (type_ids.min() < 0 or type_ids.max() >= len(self.types)):
                raise InvalidRequestError(f"token type id out of range [0, {len(self.types)})")
            x = x + self.pos[pos.reshape(-1)] + self.types[np.asarray(type_ids, np.int64).reshape(-1)]
        return self._layer_norm(np.ascontiguousarray(x, dtype=np.float32), self.emb_ln)

    def encode(self, ids: np.ndarray, mask: np.ndarray, type_ids: np.ndarray | None = None) -> np.ndarray:
        """Last hidden state (S, T, C) of right-padded `ids` (S, T) with 0/1 `mask` (S, T) (and
        `type_ids` (S, T), the segment of each token of a sentence pair)."""
        ids = np.asarray(ids, dtype=np.int64)
        mask = np.asarray(mask, dtype=np.int64)
        S, T = ids.shape
        cfg = self.cfg
        H, D, C = cfg.num_attention_heads, cfg.head_dim, cfg.hidden_size
        x = self.embeddings(ids, mask, type_ids)  # (S*T, C)
        bias = None  # (S, 1, 1, T) additive key mask; None when nothing is padded
        if not mask.all():
            bias = ((1 - mask) * np.float32(-1e30)).astype(np.float32)[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(D))
        for layer in self.layers:
            qkv = layer.qkv(x).reshape(S, T, 3, H, D)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3) * scale  # (S, H, T, D)
            k = qkv[:, :, 1].transpose(0, 2, 3, 1)  # (S, H, D, T)
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)  # (S, H, T, D)
            probs = np.matmul(q, k)  # (S, H, T, T)
            if bias is not None:
                probs += bias
            # Softmax in numpy: its SIMD float32 exp beats a scalar-exp kernel ~7x at these sizes.
            probs -= probs.max(axis=-1, keepdims=True)
            np.exp(probs, out=probs)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = np.matmul(probs, v).transpose(0, 2, 1, 3).reshape(S * T, C)  # (S*T, C)
            y = layer.out(ctx)
            y += x
            x = self._layer_norm(y, layer.ln1)
            h = self._act(layer.up(x))  # (S*T, F)
            y = layer.down(h)
            y += x
            x = self._layer_norm(y, layer.ln2)
        return x.reshape(S, T, C)

    def pool(self, hidden: np.ndarray, mask: np.ndarray, normalize: bool | None = None) -> np.ndarray:
        """(S, T, C) hidden states -> (S, C) sentence vectors by the configured pooling, L2-normalized as
        configured (or as `normalize` says when given)."""
        m = np.asarray(mask, dtype=np.float32)[:, :, None]  # (S, T, 1)
        if self.cfg.pooling == "cls":
            out = hidden[:, 0, :]
        elif self.cfg.pooling == "last":
            last = np.maximum(np.asarray(mask).sum(axis=1) - 1, 0)  # (S,) right padding
            out = hidden[np.arange(hidden.shape[0]), last]
        elif self.cfg.pooling == "max":
            out = np.where(m > 0, hidden, -np.inf).max(axis=1)
        else:
            out = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        out = np.ascontiguousarray(out, dtype=np.float32)
        if self.cfg.normalize if normalize is None else normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def embed(self, ids: np.ndarray, mask: np.ndarray, normalize: bool | None = None) -> np.ndarray:
        return self.pool(self.encode(ids, mask), mask, normalize)
