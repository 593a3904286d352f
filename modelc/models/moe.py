"""Mixture-of-experts feed-forward (Mixtral, Qwen3-MoE, gpt-oss): router top-k, then the tokens of the
whole batch grouped by expert, so each chosen expert's weights are read once per forward.

Expert weights stay as stored (quantized, memory-mapped): GGUF's 3-D ffn_*_exps tensors and
transformers' fused experts are sliced per expert without copying; HF's per-expert tensors are
used as they are. Where the 3-D tensors are of a type kernels/layer/moe_ffn.py reads, a forward of up to
moe_ffn.FUSED_MAX_T tokens (decode), or of any size where the experts stay on gemm_r16 (MoeFFN.one_call),
runs the layer's experts in one kernel call (KernelSet.moe_ffn); otherwise each chosen expert is three matmuls.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from modelc.errors import FormatError, UnsupportedError
from modelc.ir import SCALE_SUFFIX, TensorData
from modelc.kernels.layer import moe_ffn
from modelc.kernels.layer.moe_weights import MoeExperts, stack_experts
from modelc.kernels.matmul.linear import Weight, prepare_weight
from modelc.kernels.matmul.plan import Path, paths_up_to
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_moe
from modelc.kernels.select import KernelSet
from modelc.models.weights import WeightReader

OSS_ALPHA, OSS_LIMIT = ref_moe.OSS_ALPHA, ref_moe.OSS_LIMIT  # gpt-oss's clamped SwiGLU

_NAMES = {  # naming -> (router, [per-expert gate, up, down] or fused 3-D gate, up, down, gate_up)
    "gguf": {
        "router": "blk.{i}.ffn_gate_inp",
        "gate": "blk.{i}.ffn_gate_exps",
        "up": "blk.{i}.ffn_up_exps",
        "down": "blk.{i}.ffn_down_exps",
    },
    "mixtral": {
        "router": "model.layers.{i}.block_sparse_moe.gate",
        "gate": "model.layers.{i}.block_sparse_moe.experts.{e}.w1",
        "up": "model.layers.{i}.block_sparse_moe.experts.{e}.w3",
        "down": "model.layers.{i}.block_sparse_moe.experts.{e}.w2",
    },
    "hf": {
        "router": "model.layers.{i}.mlp.gate",
        "gate": "model.layers.{i}.mlp.experts.{e}.gate_proj",
        "up": "model.layers.{i}.mlp.experts.{e}.up_proj",
        "down": "model.layers.{i}.mlp.experts.{e}.down_proj",
    },
    "hf-oss": {  # gpt-oss: gate_up (E, C, 2F) with gate and up columns interleaved, down (E, F, C), "_bias"es
        "router": "model.layers.{i}.mlp.router",
        "gate_up": "model.layers.{i}.mlp.experts.gate_up_proj",
        "down": "model.layers.{i}.mlp.experts.down_proj",
    },
}


@dataclass(slots=True)
class MoeFFN:
    router: Weight  # (E, C)
    router_bias: np.ndarray | None  # (E,)
    gate: list[Weight]  # per expert (F, C)
    up: list[Weight]
    down: list[Weight]  # per expert (C, F)
    gate_bias: np.ndarray | None  # (E, F) gpt-oss
    up_bias: np.ndarray | None
    down_bias: np.ndarray | None  # (E, C)
    top_k: int
    normalize: bool  # renormalize the chosen experts' weights to sum 1
    activation: str  # "silu" | "oss" (gpt-oss's clamped SwiGLU)
    stacked: MoeExperts | None = None  # the 3-D expert tensors, where KernelSet.moe_ffn reads them
    _all_r16: bool | None = dataclasses.field(default=None, repr=False)  # (one_call's cache)

    @property
    def num_experts(self) -> int:
        return len(self.gate)

    def route(self, h: np.ndarray, kernels: KernelSet) -> tuple[np.ndarray, np.ndarray]:
        """(experts (T, k) int64, weights (T, k) f32): softmax over all experts, top-k, optionally renormalized
        (with renormalization this equals a softmax over the top-k logits, as Mixtral and gpt-oss do)."""
        return ref_moe.route(self._logits(h, kernels), self.top_k, self.normalize)

    def _logits(self, h: np.ndarray, kernels: KernelSet) -> np.ndarray:
        logits = np.empty((h.shape[0], self.num_experts), np.float32)  # (T, E)
        kernels.matmul(logits, h, self.router)
        if self.router_bias is not None:
            logits += self.router_bias
        return logits

    def forward(self, out: np.ndarray, h: np.ndarray, kernels: KernelSet) -> None:
        """out (T, C) = sum over each token's chosen experts of weight * expert(h)."""
        T = h.shape[0]
        if self.one_call(T):  # an F32 router runs in the kernel too
            logits = None if self.stacked.router is not None else self._logits(h, kernels)
            kernels.moe_ffn(out, h, logits, self.stacked, self.top_k, self.normalize)
            return
        experts, weights = self.route(h, kernels)
        if T == 1:  # decode of one sequence: its k experts in turn, no grouping to do
            out[...] = 0.0
            for j in range(self.top_k):
                y = self._expert(int(experts[0, j]), h, kernels)
                y *= weights[0, j]
                out += y
            return
        out[...] = 0.0
        flat = experts.reshape(-1)
        order = np.argsort(flat, kind="stable")  # (T*k,) grouped by expert
        counts = np.bincount(flat, minlength=self.num_experts)
        start = 0
        for e in np.nonzero(counts)[0]:
            sel = order[start : start + counts[e]]
            start += counts[e]
            rows = sel // self.top_k  # a token picks an expert at most once: rows are distinct
            y = self._expert(int(e), np.ascontiguousarray(h[rows]), kernels)  # (n, C)
            y *= weights.reshape(-1)[sel][:, None]
            out[rows] += y
        assert start == T * self.top_k

    def one_call(self, T: int) -> bool:
        """Whether a forward of T tokens runs the experts in moe_ffn's one call: up to moe_ffn.FUSED_MAX_T
        tokens, and up to moe_ffn.R16_MAX_T where the per-expert matmuls would run gemm_r16 at every token
        count (the repacked layout the call reads too: one call instead of three matmuls an expert, the same
        kernel; measured there). Where the table moves bigger expert batches to AMX tiles or BLAS, prefill keeps
        the per-expert matmuls."""
        if self.stacked is None:
            return False
        if T <= moe_ffn.FUSED_MAX_T:
            return True
        if self._all_r16 is None:
            ws = (self.gate[0], self.up[0], self.down[0])
            self._all_r16 = all(paths_up_to(w, moe_ffn.R16_MAX_T) == {Path.R16} for w in ws)
        return self._all_r16 and T <= moe_ffn.R16_MAX_T

    def _expert(self, e: int, x: np.ndarray, kernels: KernelSet) -> np.ndarray:
        n, F = x.shape[0], self.gate[e].rows
        gate, up = np.empty((n, F), np.float32), np.empty((n, F), np.float32)
        kernels.matmul(gate, x, self.gate[e])
        kernels.matmul(up, x, self.up[e])
        if self.gate_bias is not None:
            gate += self.gate_bias[e]
            up += self.up_bias[e]  # type: ignore[index]
        act = np.empty_like(gate)
        if self.activation == "oss":
            g = np.minimum(gate, np.float32(OSS_LIMIT))
            u = np.clip(up, np.float32(-OSS_LIMIT), np.float32(OSS_LIMIT))
            act[...] = g / (np.float32(1.0) + np.exp(-np.float32(OSS_ALPHA) * g)) * (u + np.float32(1.0))
        else:
            kernels.silu_mul(act, gate, up)
        y = np.empty((n, self.down[e].rows), np.float32)
        kernels.matmul(y, act, self.down[e])
        if self.down_bias is not None:
            y += self.down_bias[e]
        return y


def expert_slices(t: TensorData, name: str) -> list[TensorData]:
    """A stored (E, R, C) tensor as E zero-copy (R, C) TensorData views."""
    if len(t.shape) != 3:
        raise FormatError(f"tensor {name} has shape {t.shape}, expected (experts, rows, cols)")
    E = t.shape[0]
    per = t.nbytes // E if E else 0
    return [TensorData(t.shape[1:], t.dtype, t.data[e * per : (e + 1) * per]) for e in range(E)]


def _stacked(w: WeightReader, name: str, E: int, rows: int, cols: int, r16: np.ndarray | None) -> list[Weight]:
    """Expert matrices of a stored (E, rows, cols) tensor, each with its slice of the repacked copy `r16`."""
    t = w.tensor(name)
    if t.shape != (E, rows, cols):
        raise FormatError(f"tensor {name} has shape {t.shape}, expected ({E}, {rows}, {cols})")
    scale = w.tensors.get(name + SCALE_SUFFIX)
    scales = expert_slices(scale, name) if scale is not None and len(scale.shape) == 3 else [None] * E
    ws = [prepare_weight(p, s) for p, s in zip(expert_slices(t, name), scales, strict=True)]
    return ws if r16 is None else [dataclasses.replace(x, r16=r16[e]) for e, x in enumerate(ws)]


def _load_oss(w: WeightReader, n: dict[str, str], E: int, k: int, F: int, C: int, cfg: dict) -> MoeFFN:
    """gpt-oss's HF layout, stored (in, out): float weights are transposed and de-interleaved once at load
    (a copy; its MXFP4 *_blocks checkpoints are not read here)."""
    if not w.has(n["gate_up"]) and w.has(n["gate_up"] + "_blocks"):
        raise UnsupportedError(
            f"model {w.name}: gpt-oss MXFP4 expert blocks in a Hugging Face folder are not read; "
            "use its GGUF conversion (llama.cpp's convert_hf_to_gguf.py)"
        )
    gu, dn = w.tensor(n["gate_up"]), w.tensor(n["down"])
    if gu.shape != (E, C, 2 * F) or dn.shape != (E, F, C):
        raise FormatError(
            f"gpt-oss experts have shapes {gu.shape} and {dn.shape}, expected ({E}, {C}, {2 * F}), ({E}, {F}, {C})"
        )
    gu_f, dn_f = w.kernels.dequantize(gu).reshape(E, C, 2 * F), w.kernels.dequantize(dn).reshape(E, F, C)

    def f32(a: np.ndarray) -> Weight:
        return prepare_weight(TensorData.from_array(np.ascontiguousarray(a, dtype=np.float32)))

    gb = w.vector(n["gate_up"] + "_bias", E * 2 * F).reshape(E, 2 * F)
    return MoeFFN(
        router=w.matrix(n["router"] + ".weight", E, C),
        router_bias=w.maybe_vector(n["router"] + ".bias", E),
        gate=[f32(gu_f[e, :, 0::2].T) for e in range(E)],
        up=[f32(gu_f[e, :, 1::2].T) for e in range(E)],
        down=[f32(dn_f[e].T) for e in range(E)],
        gate_bias=np.ascontiguousarray(gb[:, 0::2]),
        up_bias=np.ascontiguousarray(gb[:, 1::2]),
        down_bias=w.vector(n["down"] + "_bias", E * C).reshape(E, C),
        top_k=k,
        normalize=True,
        activation="oss",
    )


def load_moe(w: WeightReader, naming: str, i: int, cfg: dict, C: int) -> MoeFFN | None:
    """Layer i's MoE feed-forward, or None when the layer has a dense MLP."""
    E, k = int(cfg.get("num_experts") or 0), int(cfg.get("num_experts_per_tok") or 0)
    if E <= 0:
        return None
    F = int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"])

    def bias(key: str, size: int) -> np.ndarray | None:
        name = n.get(key, "") + ".bias"
        return w.vector(name, E * size).reshape(E, size) if key in n and w.has(name) else None

    kinds = ["gguf"] if naming == "gguf" else ["mixtral", "hf", "hf-oss"]
    for kind in kinds:
        n = {key: v.replace("{i}", str(i)) for key, v in _NAMES[kind].items()}
        if w.has(n["router"] + ".weight"):
            break
    else:
        return None
    if not 0 < k <= E:
        raise FormatError(f"num_experts_per_tok {k} must be in 1..num_experts {E}")
    biases = (bias("gate", F), bias("up", F), bias("down", C))
    oss = cfg.get("moe_activation") == "oss"
    stacked = None
    if kind == "gguf":
        router = w.matrix(n["router"] + ".weight", E, C)
        ts = [w.tensor(n[p] + ".weight") for p in ("gate", "up", "down")]
        st = stack_experts(
            *ts, biases=biases, oss=oss, router=router, router_bias=w.maybe_vector(n["router"] + ".bias", E)
        )
        fused = moe_ffn.supported(st)  # I8/I4 (with @scale tensors) never are
        # repacked where the one-call kernel reads the copy (else it would map the file's pages beside it)
        r16 = [w.stacked_r16(t) if not fused or quant.KIND.get(t.dtype) in moe_ffn.R16_KINDS else None for t in ts]
        gate = _stacked(w, n["gate"] + ".weight", E, F, C, r16[0])
        up = _stacked(w, n["up"] + ".weight", E, F, C, r16[1])
        down = _stacked(w, n["down"] + ".weight", E, C, F, r16[2])
        stacked = dataclasses.replace(st, gate_r16=r16[0], up_r16=r16[1], down_r16=r16[2]) if fused else None
    elif "gate" in n:
        gate = [w.matrix(n["gate"].format(e=e) + ".weight", F, C) for e in range(E)]
        up = [w.matrix(n["up"].format(e=e) + ".weight", F, C) for e in range(E)]
        down = [w.matrix(n["down"].format(e=e) + ".weight", C, F) for e in range(E)]
    else:
        return _load_oss(w, n, E, k, F, C, cfg)
    return MoeFFN(
        router=w.matrix(n["router"] + ".weight", E, C),
        router_bias=w.maybe_vector(n["router"] + ".bias", E),
        gate=gate,
        up=up,
        down=down,
        gate_bias=biases[0],
        up_bias=biases[1],
        down_bias=biases[2],
        top_k=k,
        normalize=bool(cfg.get("norm_topk_prob", True)),
        activation="oss" if oss else "silu",
        stacked=stacked,
    )
