"""Which layers of a LlamaModel take a decode step through the decode layers (kernels/layer/decode_layer.py's
attention and MLP halves, called by kernels/layer/decode_step.py's entries), up to how many tokens, the arguments
of each that do not change between steps, and the runs of consecutive layers that go in one numba call each
(DecodeRuns: a dense model's whole stack in one).

A layer qualifies when it is the plain pre-norm block those halves implement: RMSNorm before attention and
before the FFN, optional projection biases (Qwen2's q/k/v, llama's attention_bias / mlp_bias), no post-norms, no sinks or soft-capping, optional per-head q/k RMSNorm, optional
RoPE (not long-RoPE, no attention factor), SiLU-gated MLP or a mixture of experts (moe_ffn, called after the
attention half), and every projection at T = 1 on the gemm_r16 path (alone or in a fused run) or on
gemm_fused_k's one-token kernel (Q5_K, and the K-quants where not repacked). A step takes
it when every sequence of it is one token (a single stream, or streams in lockstep), with no LoRA, on a KV
cache of float32 / fp16 pages that attention_rows reads or plain q8_0 pages (attention_rows_q8), and a layer takes it up to its plan's `max_t` tokens:
as many as every matmul of the layer stays on the path it has at one token (gemm_r16 at any T up to
fused.MAX_T here; gemm_fused_k's kernel at one token only), and its experts in moe_ffn's one call. Anything
else runs the forward's general per-kernel path, layer by layer, between the runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.kernels.attention import attention
from modelc.kernels.layer import decode_layer, decode_step, moe_ffn
from modelc.kernels.matmul.linear import Weight
from modelc.kernels.matmul.plan import Path, path
from modelc.kernels.quant import quant
from modelc.models.fused import MAX_T, Fused


@dataclass(frozen=True, slots=True)
class LayerPlan:
    norms: tuple  # (attn_norm, eps)
    qkv: tuple  # (w0, kind0, how0, end0, w1, kind1, how1, end1, w2, kind2, how2, q | k | v biases or NO_F32)
    heads: tuple  # (heads, kv_heads, head_dim, q_norm, k_norm, inv_freq, neox)
    window: int
    out: tuple  # (o_w, o_kind, o_how, o bias or NO_F32, ffn_norm)
    mlp: tuple | None  # gate | up as mlp_half takes them: (w0, kind0, how0, end0, w1, kind1, how1, biases)
    down: tuple | None  # (down_w, down_kind, down_how, down bias or NO_F32); mlp and down None: MoE
    moe: tuple | None  # a MoE layer's moe_ffn._moe_ffn arguments after (out, x) and before the thread count,
    # where the kernel computes the router itself (else None: the layer's MoeFFN.forward runs)
    max_t: int = 1  # the most tokens a step may have for this layer to take it (_max_t)


def plan_layers(model: Any) -> list[LayerPlan | None] | None:
    """Per layer, its LayerPlan or None (it runs the general path); None when no layer qualifies."""
    a = model.args
    if model.kernels.name != "numba" or a.attn_softcap or model.inv_freq_long is not None:
        return None
    if a.rope_attn_factor != 1.0 or a.residual_scale != 1.0 or a.activation != "silu" or a.head_dim % 16:
        return None
    plans = [_plan(model, i, L) for i, L in enumerate(model.layers)]
    return plans if any(p is not None for p in plans) else None


def _plan(model: Any, i: int, L: Any) -> LayerPlan | None:
    a = model.args
    if L.attn_norm is None or L.ffn_norm is None or L.post_attn_norm is not None or L.post_ffn_norm is not None:
        return None
    if L.sinks is not None or (L.q_norm is None) != (L.k_norm is None):
        return None
    qkv_bias, gu_bias = _biases((L.q_bias, L.k_bias, L.v_bias)), _biases((L.gate_bias, L.up_bias))
    if qkv_bias is None or gu_bias is None:
        return None
    qkv, o = _runs((L.q, L.k, L.v), L.qkv, 3), _how(L.o)
    if qkv is None or o is None:
        return None
    mlp = down = moe = None
    if L.moe is not None:
        st = L.moe.stacked  # moe_ffn's experts with an F32 router it runs itself: called straight from forward
        if st is not None and st.router is not None:
            moe = (moe_ffn._NONE, *moe_ffn.router_args(st), *moe_ffn.expert_args(st, L.moe.top_k, L.moe.normalize))
    else:
        mlp, dn = _runs((L.gate, L.up), L.gate_up, 2), _how(L.down)
        if mlp is None or dn is None:
            return None
        mlp = (*mlp, gu_bias)
        down = (dn[0], quant.KIND[L.down.dtype], dn[1], _bias(L.down_bias))
    inv = model.layer_inv_freq[i]
    no = decode_layer.NO_F32
    return LayerPlan(
        (L.attn_norm, float(a.rms_norm_eps)),
        (*qkv, qkv_bias),
        (a.num_heads, a.num_kv_heads, a.head_dim, no if L.q_norm is None else L.q_norm,
         no if L.k_norm is None else L.k_norm, decode_layer.NO_F64 if inv is None else inv, bool(a.rope_neox)),
        int(a.layer_windows[i]),
        (o[0], quant.KIND[L.o.dtype], o[1], _bias(L.o_bias), L.ffn_norm),
        mlp,
        down,
        moe,
        _max_t(L, qkv, o[1], mlp, down, moe),
    )  # fmt: skip


def _max_t(L: Any, qkv: tuple, o_how: int, mlp: tuple | None, down: tuple | None, moe: tuple | None) -> int:
    """The most tokens up to which the layer's step computes what the general path does at that many: every
    matmul on the path it has at T = 1 (gemm_r16: the table keeps it there up to AMX's prefill bounds; the
    fused runs while Fused.fits), and a MoE layer's experts in moe_ffn's one call (MoeFFN.one_call: up to its
    FUSED_MAX_T, or R16_MAX_T where every expert matmul stays on gemm_r16); at most fused.MAX_T (the model's
    fused output buffer)."""
    hows = [qkv[2], qkv[6], qkv[10], o_how] + ([mlp[2], mlp[6], down[2]] if mlp is not None else [])
    if any(h == decode_layer.MATVEC_K for h in hows):
        return 1  # gemm_fused_k's kernel is the one-token path only
    if L.moe is not None and moe is None:
        return 1  # the layer's MoeFFN.forward: the experts one by one at one token, grouped at more
    top = MAX_T
    if moe is not None and not L.moe.one_call(MAX_T):  # above FUSED_MAX_T: per-expert matmuls (AMX, BLAS)
        top = min(MAX_T, moe_ffn.FUSED_MAX_T)
    runs = [*L.qkv, *L.gate_up]
    weights = [*_alone((L.q, L.k, L.v), L.qkv), L.o, *_alone((L.gate, L.up), L.gate_up), L.down]
    weights = [w for w in weights if w is not None]
    for t in range(2, top + 1):
        if any(path(w, t) is not path(w, 1) for w in weights) or any(f.fits(t) != f.fits(1) for f in runs):
            return t - 1
    return top


DENSE, MOE, ATTENTION = "dense", "moe", "attention"
"""What one of decode_step's entries runs for a run of layers: decode_layers (the attention half and the gated
MLP), decode_layers_moe (the attention half and moe_ffn's experts with their router) or attention_layers (the
attention half only: the forward then runs the layer's MoeFFN.forward)."""
_LAYOUTS = {DENSE: decode_step.ATTENTION + decode_step.MLP, MOE: decode_step.ATTENTION + decode_step.MOE,
            ATTENTION: decode_step.ATTENTION}  # fmt: skip


def layer_kind(p: LayerPlan) -> str:
    if p.moe is not None:
        return MOE
    return ATTENTION if p.mlp is None else DENSE


@dataclass(frozen=True, slots=True)
class Run:
    """Layers start .. end - 1 of a decode step in one call of decode_step's entry for `kind`."""

    start: int
    end: int
    kind: str  # DENSE, MOE or ATTENTION (then one layer: its MoeFFN.forward runs after the call)
    table: np.ndarray  # (end - start, row width) int64: the layers' rows (decode_step.encode)
    kinds: np.ndarray  # the layers' matmul paths and weight kinds (decode_layer.kinds_token), the entry's last argument


class DecodeRuns:
    """A model's decode layers (its LayerPlans) as runs of consecutive layers, each one numba call: every layer in
    one call where all qualify alike (a dense model: the whole step), general layers between runs elsewhere.

    A layer's row of its kind's table is encoded once, at load; the runs for a token count are made on the first
    step with that many tokens (a layer joins a run up to its max_t). The plans keep the tables' arrays alive."""

    def __init__(self, plans: list[LayerPlan | None], longest: int | None = None):
        """longest: at most this many layers a run (None: no bound; tests run every layer on its own with 1)."""
        self.plans = plans
        self.longest = longest
        self.rows = [None if p is None else decode_step.encode(_LAYOUTS[layer_kind(p)], step_parts(p)) for p in plans]
        self._runs: dict[int, tuple[Run, ...]] = {}

    @property
    def max_t(self) -> int:
        """The most tokens a step may have for some layer to take its decode layer."""
        return max(p.max_t for p in self.plans if p is not None)

    def runs(self, t: int) -> tuple[Run, ...]:
        """The runs of a step of t one-token rows, in layer order."""
        got = self._runs.get(t)
        if got is None:
            got = self._runs[t] = self._make(t)
        return got

    def _make(self, t: int) -> tuple[Run, ...]:
        runs: list[Run] = []
        i, n = 0, len(self.plans)
        while i < n:
            p = self.plans[i]
            if p is None or t > p.max_t:
                i += 1
                continue
            kind, j = layer_kind(p), i + 1
            top = n if self.longest is None else min(n, i + self.longest)
            while kind != ATTENTION and j < top:
                q = self.plans[j]
                if q is None or t > q.max_t or layer_kind(q) != kind:
                    break
                j += 1
            pairs = [pair for q in self.plans[i:j] for pair in matmuls(q)]  # type: ignore[arg-type]
            runs.append(Run(i, j, kind, np.array(self.rows[i:j], np.int64), decode_layer.kinds_token(pairs)))
            i = j
        return tuple(runs)


def plan_decode(model: Any, longest: int | None = None) -> DecodeRuns | None:
    """The model's DecodeRuns (at most `longest` layers a run), or None where no layer qualifies (plan_layers)."""
    plans = plan_layers(model)
    return None if plans is None else DecodeRuns(plans, longest)


def matmuls(p: LayerPlan) -> list[tuple[int, int]]:
    """The (how, kind) of each matmul of a LayerPlan that its decode layer runs (decode_layer._mm's)."""
    q = p.qkv
    pairs = [(q[2], q[1]), (q[6], q[5]), (q[10], q[9]), (p.out[2], p.out[1])]
    if p.mlp is not None and p.down is not None:
        pairs += [(p.mlp[2], p.mlp[1]), (p.mlp[6], p.mlp[5]), (p.down[2], p.down[1])]
    return pairs


def step_parts(p: LayerPlan) -> tuple:
    """A LayerPlan's fields as decode_step's layouts order them: ATTENTION's parts, then MOE's or MLP's (none for
    an ATTENTION layer)."""
    rest = (p.moe,) if p.moe is not None else (p.mlp, p.down) if p.mlp is not None else ()
    return ((p.norms[0],), p.qkv, p.heads[3:], (p.window,), p.out, *rest)


def _bias(b: np.ndarray | None) -> np.ndarray:
    return decode_layer.NO_F32 if b is None else b


def _biases(bs: tuple) -> np.ndarray | None:
    """Consecutive projections' biases as one vector (all of them, or NO_F32 for none); None when only some
    have one (the forward adds all or none)."""
    if all(b is None for b in bs):
        return decode_layer.NO_F32
    if any(b is None for b in bs):
        return None
    return np.ascontiguousarray(np.concatenate(bs), dtype=np.float32)


def _how(w: Weight | None) -> tuple[np.ndarray, int] | None:
    """(the array the kernel reads, decode_layer's how) for a weight's T = 1 matmul, or None where decode_layer
    does not run its path (only gemm_r16's and gemm_fused_k's one-token kernel)."""
    if w is None:
        return None
    p = path(w, 1)
    if p is Path.R16 and w.r16 is not None:
        return w.r16, decode_layer.R16
    if p is Path.MATVEC_K:  # (read-only file blocks beside writable repacked arrays: another numba specialization)
        return w.blocks, decode_layer.MATVEC_K
    return None


def _runs(ws: tuple, fused: tuple[Fused, ...], n: int) -> tuple | None:
    """The n consecutive projections ws as up to n matmuls, each writing its rows' range of one buffer:
    (w_0, kind_0, how_0, end_0, ..., w_{n-1}, kind_{n-1}, how_{n-1}) with how NONE for the unused ones
    (decode_layer's convention: matmul j writes [end_{j-1}, end_j), the last one to the buffer's end);
    None if a projection's T = 1 path is not one decode_layer runs."""
    mms: list[tuple[np.ndarray, int, int, int]] = []  # (array, kind, how, rows)
    j = 0
    while j < n:
        run = next((f for f in fused if f.first == j and f.fits(1)), None)
        if run is not None:
            mms.append((run.weight.r16, quant.KIND[run.weight.dtype], decode_layer.R16, run.weight.rows))
            j += len(run.bounds) - 1
            continue
        got = _how(ws[j])
        if got is None:
            return None
        mms.append((got[0], quant.KIND[ws[j].dtype], got[1], ws[j].rows))
        j += 1
    out: list[Any] = []
    end = 0
    for k in range(n):
        if k < len(mms):
            w, kind, how, rows = mms[k]
            end += rows
        else:
            w, kind, how = decode_layer.NO_W, -1, decode_layer.NONE
        out += [w, kind, how] if k == n - 1 else [w, kind, how, end]
    return tuple(out)


def _alone(ws: tuple, fused: tuple[Fused, ...]) -> list:
    """The projections of ws that no fused run covers at one token (each is its own matmul)."""
    covered = {f.first + j for f in fused if f.fits(1) for j in range(len(f.bounds) - 1)}
    return [w for j, w in enumerate(ws) if j not in covered]


def step_ok(batch: Any, kv: Any) -> bool:
    """Whether this forward may take the fused layers (each layer up to its max_t tokens): every sequence one
    token, no LoRA, float32 / fp16 pages (what attention_rows reads) or a plain q8_0 cache (attention_rows_q8;
    not the mixed cache's hot copies); the head size was checked by plan_layers."""
    T = batch.num_tokens
    if batch.lora or T > MAX_T or T != batch.num_seqs:
        return False
    if T > 1 and attention.batch_facts(batch.q_start, batch.pos_start)[1] != 1:
        return False
    if kv.ks is not None:
        return kv.window == 0 and kv.k.dtype == np.int8
    return kv.k.dtype in (np.float32, np.uint16)


def kv_scales(kv: Any) -> tuple[np.ndarray, np.ndarray]:
    """The decode layers' k_scales, v_scales for all layers ((L, P, Z, K, NB) fp16 bits): a q8_0 cache's, else a
    placeholder the kernels never read."""
    if kv.ks is None:
        return decode_layer.NO_SCALES, decode_layer.NO_SCALES
    return kv.ks, kv.vs


def attention_parallel(batch: Any, kv_heads: int, threads: int) -> bool:
    """attention._numba_attention's choice for attention_rows' kernel at T one-token rows (a row's KV heads
    are its items; the latest first position + T the context)."""
    if threads <= 1:
        return False
    T = batch.num_tokens
    last = int(batch.pos_start[0]) if T == 1 else attention.batch_facts(batch.q_start, batch.pos_start)[2]
    return attention.share_work(T * kv_heads, last + T, True)
