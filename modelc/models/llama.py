"""The LLaMA family (LLaMA 2/3, Mistral, Qwen2 with QKV bias, Phi-3 with fused QKV / gate_up) on paged KV.

Args come from the normalized config once; weight names ("hf" or "gguf") and fused
tensors are resolved at load; `forward` is one batched pass over a flat token list.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelc.artifact.structure import output_head
from modelc.cache.kv_pages import KVPages
from modelc.errors import UnsupportedError
from modelc.ir import SCALE_SUFFIX
from modelc.kernels.elementwise.rope import longrope_long_inv_freq, rope_inv_freq
from modelc.kernels.layer import decode_step
from modelc.kernels.matmul.linear import Weight
from modelc.kernels.runtime.threads import kernel_threads
from modelc.kernels.select import KernelSet
from modelc.models import llama_decode, residency
from modelc.models.batch import ForwardBatch, LoraRows
from modelc.models.fused import MAX_T, Fused
from modelc.models.llama_args import LlamaArgs
from modelc.models.llama_layer import HF_NORMS, NAMES, PROJECTIONS, LlamaLayer, load_layer
from modelc.models.moe import load_moe
from modelc.models.scratch import Scratch
from modelc.models.streaming import Streamer
from modelc.models.weights import WeightReader


def apply_lora(out: np.ndarray, x: np.ndarray, lora: tuple[LoraRows, ...], key: tuple[int, str]) -> None:
    """out[rows] += scale * (x[rows] @ A.T) @ B.T for each adapter group that adapts `key`."""
    for group in lora:
        ab = group.adapter.pairs.get(key)  # type: ignore[attr-defined]
        if ab is None:
            continue
        a_mat, b_mat, scale = ab
        rows = group.rows
        out[rows] += ((x[rows] @ a_mat.T) @ b_mat.T) * np.float32(scale)


_NO_SINKS = np.zeros(0, np.float32)
_QKV, _GATE_UP = ("q", "k", "v"), ("gate", "up")


class LlamaModel:
    """Weights + a batched forward. Not thread-safe: one forward at a time (its Scratch is shared)."""

    def __init__(self, source: Any, kernels: KernelSet):
        naming = getattr(source, "naming", "hf") or "hf"
        if naming not in NAMES:
            raise UnsupportedError(f"unknown tensor naming {naming!r}")
        self.args = a = LlamaArgs.from_config(dict(source.config), naming, source.architecture)
        self.args_arch = str(source.architecture)
        self.kernels = kernels
        names = {**NAMES[naming], **(HF_NORMS[a.norm_layout] if naming == "hf" else {})}
        w = WeightReader(source, kernels)
        self.embed = w.tensor(names["embed"])  # (V, C) stored dtype, rows looked up per forward
        self.embed_rscale = w.tensors.get(names["embed"] + SCALE_SUFFIX)  # (V,) I8/I4 per-row scales, else None
        cfg = dict(source.config)
        self.layers = [
            load_layer(w, names, a, i, load_moe(w, naming, i, cfg, a.hidden_size)) for i in range(a.num_layers)
        ]
        self.norm = w.vector(names["norm"], a.hidden_size) + np.float32(a.norm_offset)
        self.lm_head = w.matrix(output_head(w.tensors, naming) or names["lm_head"], a.vocab_size, a.hidden_size)
        inv = rope_inv_freq(a.rotary_dim, a.rope_theta, a.rope_scaling)  # (R/2,)
        freqs = source.config.get("rope_freqs_tensor")
        if freqs:  # llama3 / long-RoPE GGUF: per-dim frequency divisors
            inv = inv / w.vector(freqs, a.rotary_dim // 2).astype(np.float64)
        self.inv_freq = np.ascontiguousarray(inv)  # (R/2,) float64
        local = self.inv_freq
        if a.local_rope_theta:  # Gemma 3: sliding-window layers rotate with their own base, unscaled
            local = np.ascontiguousarray(rope_inv_freq(a.rotary_dim, a.local_rope_theta))
        rope_on = a.rope_layers or (True,) * a.num_layers
        # per layer: the frequencies it rotates q and k with, or None (SmolLM3's RoPE-less layers)
        self.layer_inv_freq = [
            (local if a.layer_windows[i] else self.inv_freq) if rope_on[i] else None for i in range(a.num_layers)
        ]
        # long-RoPE (Phi-3.5/Phi-4): a sequence longer than a.rope_long_after rotates with the long factors
        self.inv_freq_long = self._long_inv_freq(w, source.config) if a.rope_long_after else None
        qd, kd = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
        # one fused matmul's output (fused.py): fused runs serve up to MAX_T tokens, so this stays small
        self.fused_out = np.empty(MAX_T * max(qd + 2 * kd, 2 * a.intermediate_size), np.float32)
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
        # streamed weights (residency.py): a Streamer reads each layer ahead of the forward and drops it after
        plan = residency.plan_for(source)
        self.stream = (
            Streamer(source, plan.budget_bytes) if plan is not None and plan.mode == residency.STREAMED else None
        )
        # which layers a step of one-token rows runs in decode_step's numba calls, in runs of consecutive layers
        # (None: every layer takes the general path; llama_decode.py); streamed: one layer a run, so the Streamer
        # sees every layer enter and leave
        self.decode = llama_decode.plan_decode(self, longest=1 if self.stream is not None else None)

    @property
    def hidden_size(self) -> int:
        return self.args.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size

    def projection_shapes(self) -> dict[tuple[int, str], tuple[int, int]]:
        """{(layer, proj): (out, in)} of every projection a LoRA adapter may target."""
        return {
            (i, p): getattr(L, p).shape
            for i, L in enumerate(self.layers)
            for p in PROJECTIONS
            if getattr(L, p) is not None
        }

    def shift_keys(self, kv: KVPages, pages: np.ndarray, delta: int) -> None:
        """Context shift: the rows of `pages` moved by `delta` positions; RoPE composes, so rotating the
        stored (already rotated) keys by delta puts them where a prefill at the new positions would."""
        if self.inv_freq_long is not None:  # the keys' frequencies depend on their sequence's length
            raise UnsupportedError("context shift is not supported for long-RoPE models (Phi-3.5/Phi-4)")
        for i, inv in enumerate(self.layer_inv_freq):
            if inv is not None:  # layers without RoPE (SmolLM3's NoPE layers) keep their keys
                kv.rotate_keys(i, pages, lambda x, inv=inv: self.kernels.rope(
                    x, np.full(x.shape[0], delta, np.int32), inv, self.args.rope_neox))  # fmt: skip

    def check_kv_dtype(self, kv_dtype: str) -> None:
        """UnsupportedError for a KV cache type this model's attention cannot read: the soft-capping/sinks
        kernel (Gemma 2, gpt-oss) reads f32/f16 pages only, not the q8_0 / mixed caches."""
        if kv_dtype in ("q8_0", "mixed") and (self.args.attn_softcap or any(L.sinks is not None for L in self.layers)):
            raise UnsupportedError(
                f"kv cache dtype {kv_dtype} is not supported for {self.args_arch} (attention soft-capping or sinks); "
                "use f16 or f32"
            )

    def _long_inv_freq(self, w, cfg: dict) -> np.ndarray:
        a = self.args
        tensor = cfg.get("rope_freqs_long_tensor")
        if tensor:  # GGUF: the converter's rope_factors_long, divisors of the unscaled frequencies
            inv = rope_inv_freq(a.rotary_dim, a.rope_theta) / w.vector(tensor, a.rotary_dim // 2).astype(np.float64)
        else:
            inv = longrope_long_inv_freq(a.rotary_dim, a.rope_theta, a.rope_scaling)
        return np.ascontiguousarray(inv)

    def _rope(self, q3: np.ndarray, k3: np.ndarray, batch: ForwardBatch, inv: np.ndarray, long_seqs) -> None:
        """RoPE on q and k; with long-RoPE the sequences of long_seqs rotate with the long factors. A whole
        forward longer than the original context is long throughout, as in transformers; in the engines
        the prompt's length decides once for all of a sequence's steps (every key rotated alike), so a
        sequence that only grows past the original context while decoding stays short, where transformers'
        Phi-3 generate() recomputes its whole cache with the long factors."""
        K, neox, pos = self.kernels, self.args.rope_neox, batch.positions
        if long_seqs is None or inv is not self.inv_freq or not long_seqs.any():
            K.rope(q3, pos, inv, neox)
            K.rope(k3, pos, inv, neox)
            return
        for s, long in enumerate(long_seqs):
            a, b = int(batch.q_start[s]), int(batch.q_start[s + 1])
            f = self.inv_freq_long if long else inv
            K.rope(q3[a:b], pos[a:b], f, neox)
            K.rope(k3[a:b], pos[a:b], f, neox)

    def kv_shape(self) -> tuple[int, int, int]:
        """(num_layers, num_kv_heads, head_dim) for sizing KVPages."""
        return self.args.num_layers, self.args.num_kv_heads, self.args.head_dim

    def _lin(self, out: np.ndarray, x: np.ndarray, w: Weight, lora: tuple[LoraRows, ...], key: tuple[int, str]):
        self.kernels.matmul(out, x, w)
        if lora:
            apply_lora(out, x, lora, key)

    def _lins(self, outs: tuple, x: np.ndarray, ws: tuple, fused: tuple[Fused, ...], lora, i: int, keys: tuple):
        """x @ ws[j].T (+ LoRA) for the projections one input feeds: each run in `fused` as one matmul into
        fused_out (models/fused.py), the others one call each into outs[j]. Returns the arrays holding them:
        outs[j], where a fused part's columns are copied, except at T = 1, where a fused part is its column
        range of fused_out itself (one row: contiguous, no copy; it holds until the next fused run)."""
        T = x.shape[0]
        res = list(outs)
        done = 0
        for f in fused:
            if not f.fits(T):
                continue
            n = f.weight.rows
            buf = self.fused_out[: T * n].reshape(T, n)  # (T, rows of the run)
            self.kernels.matmul(buf, x, f.weight)
            for j in range(len(f.bounds) - 1):
                part = buf[:, f.bounds[j] : f.bounds[j + 1]]
                if T == 1:
                    res[f.first + j] = part
                else:
                    outs[f.first + j][...] = part
                done |= 1 << (f.first + j)
        for j, out in enumerate(res):
            if not done >> j & 1:
                self.kernels.matmul(out, x, ws[j])
            if lora:
                apply_lora(out, x, lora, (i, keys[j]))
        return res

    def forward(self, batch: ForwardBatch, kv: KVPages, *, output: str = "logits") -> np.ndarray:
        """One pass over batch's tokens, writing their K/V to `kv`.

        Layer by layer on the general path (a kernel call from Python for each step of a layer), except where a
        step of one-token rows (decode) takes the decode layers: runs of consecutive layers in one numba call
        each, every layer in one call where all qualify alike (llama_decode.py). Both compute the same numbers.

        output="logits": (R, V) logits for batch.logit_rows (every row when None).
        output="hidden": (T, C) final hidden states after the last norm.
        """
        a, K, sc = self.args, self.kernels, self.scratch
        T = batch.num_tokens
        sc.reserve(T)
        x, o = sc.get("x", T), sc.get("o", T)  # (T, C)
        x[...] = K.dequantize_rows(self.embed, batch.token_ids, self.embed_rscale)  # (T, C)
        if a.embed_scale != 1.0:
            x *= np.float32(a.embed_scale)
        runs = self.decode.runs(T) if self.decode is not None and llama_decode.step_ok(batch, kv) else ()
        long_seqs = None  # per sequence: True where it is longer than the original context (long-RoPE)
        if self.inv_freq_long is not None:
            lens = batch.rope_lens if batch.rope_lens is not None else batch.pos_start + np.diff(batch.q_start)
            long_seqs = lens > a.rope_long_after
        i = 0
        for run in runs:
            for j in range(i, run.start):
                self._layer(j, batch, kv, long_seqs)
            self._decode_run(run, batch, kv)
            i = run.end
        for j in range(i, a.num_layers):
            self._layer(j, batch, kv, long_seqs)
        x += o
        return self._head(x, batch, output)

    def _decode_run(self, run: llama_decode.Run, batch: ForwardBatch, kv: KVPages) -> None:
        """Layers run.start .. run.end - 1 of a step of one-token rows in one numba call (kernels/layer/decode_step.py):
        the scratch's x, o, h as the general path leaves them after each layer."""
        a, sc, T = self.args, self.scratch, batch.num_tokens
        if self.stream is not None:  # one layer a run (plan_decode's longest=1)
            self.stream.enter(run.start)
        threads = kernel_threads()
        parallel = llama_decode.attention_parallel(batch, a.num_kv_heads, threads)
        nqkv = (a.num_heads + 2 * a.num_kv_heads) * a.head_dim
        args = (run.table, run.start, sc.get("x", T), sc.get("o", T), sc.get("h", T), float(a.rms_norm_eps),
                self.fused_out[: T * nqkv].reshape(T, nqkv), sc.get("q", T), sc.get("k", T), sc.get("v", T),
                a.num_heads, a.num_kv_heads, a.head_dim, batch.positions, kv.k, kv.v, *llama_decode.kv_scales(kv),
                batch.slots, batch.block_tables, batch.q_start, batch.pos_start, a.scale, parallel,
                sc.get("attn", T))  # fmt: skip
        if run.kind == llama_decode.DENSE:
            ngu = 2 * a.intermediate_size
            decode_step.decode_layers(*args, self.fused_out[: T * ngu].reshape(T, ngu), sc.get("act", T), run.kinds)
        elif run.kind == llama_decode.MOE:
            decode_step.decode_layers_moe(*args, threads, run.kinds)
        else:  # the attention half; the layer's experts through MoeFFN.forward
            decode_step.attention_layers(*args, run.kinds)
            self.layers[run.start].moe.forward(sc.get("o", T), sc.get("h", T), self.kernels)  # type: ignore[attr-defined]
        if self.stream is not None:
            self.stream.leave(run.start)

    def _layer(self, i: int, batch: ForwardBatch, kv: KVPages, long_seqs: np.ndarray | None) -> None:
        """Layer i on the general path: x += the previous layer's output o (the first layer: x as it is), then
        the attention and FFN blocks; o ends as this layer's output."""
        a, K, sc, L = self.args, self.kernels, self.scratch, self.layers[i]
        T, lora, eps = batch.num_tokens, batch.lora, a.rms_norm_eps
        x, h, o = sc.get("x", T), sc.get("h", T), sc.get("o", T)  # (T, C)
        qkv, attn = (sc.get("q", T), sc.get("k", T), sc.get("v", T)), sc.get("attn", T)
        if self.stream is not None:
            self.stream.enter(i)
        if i == 0:
            self._norm_or_copy(h, x, L.attn_norm)
        else:
            self._residual(h, x, o, L.attn_norm)  # x += previous FFN output
        q, k, v = self._lins(qkv, h, (L.q, L.k, L.v), L.qkv, lora, i, _QKV)
        q3 = q.reshape(T, a.num_heads, a.head_dim)  # (T, H, D)
        k3 = k.reshape(T, a.num_kv_heads, a.head_dim)  # (T, K, D)
        v3 = v.reshape(T, a.num_kv_heads, a.head_dim)
        if L.q_bias is not None:
            q += L.q_bias
            k += L.k_bias
            v += L.v_bias
        if L.q_norm is not None:  # per head (D,) or full width (H*D,): the same rows either way
            K.rms_norm(q.reshape(-1, L.q_norm.shape[0]), q.reshape(-1, L.q_norm.shape[0]), L.q_norm, eps)
            K.rms_norm(k.reshape(-1, L.k_norm.shape[0]), k.reshape(-1, L.k_norm.shape[0]), L.k_norm, eps)
        inv = self.layer_inv_freq[i]
        if inv is not None:
            self._rope(q3, k3, batch, inv, long_seqs)
            if a.rope_attn_factor != 1.0:  # long-RoPE scales cos and sin: the rotated dims only
                q3[:, :, : a.rotary_dim] *= np.float32(a.rope_attn_factor)
                k3[:, :, : a.rotary_dim] *= np.float32(a.rope_attn_factor)
        kp, vp = kv.layer(i)
        K.kv_write(kp, vp, k3, v3, batch.slots)
        self._attention(attn.reshape(T, a.num_heads, a.head_dim), q3, kp, vp, batch, a.layer_windows[i], L.sinks)
        self._lin(o, attn, L.o, lora, (i, "o"))
        if L.o_bias is not None:
            o += L.o_bias
        self._post(o, L.post_attn_norm)
        self._residual(h, x, o, L.ffn_norm)  # x += attention output
        if L.moe is not None:
            L.moe.forward(o, h, K)  # type: ignore[attr-defined]
        else:
            self._mlp(o, h, L, lora, i)
        self._post(o, L.post_ffn_norm)
        if self.stream is not None:
            self.stream.leave(i)

    def _attention(self, out, q3, kp, vp, batch: ForwardBatch, window: int, sinks: np.ndarray | None) -> None:
        a, K = self.args, self.kernels
        if a.attn_softcap or sinks is not None:  # Gemma 2 soft-capping, gpt-oss sinks: their own kernel
            K.paged_attention_ext(
                out, q3, kp, vp, batch.block_tables, batch.q_start, batch.pos_start, a.scale, window,
                a.attn_softcap, _NO_SINKS if sinks is None else sinks,
            )  # fmt: skip
            return
        K.paged_attention(out, q3, kp, vp, batch.block_tables, batch.q_start, batch.pos_start, a.scale, window)

    def _mlp(self, o: np.ndarray, h: np.ndarray, L: LlamaLayer, lora: tuple[LoraRows, ...], i: int) -> None:
        """o = down(act(gate(h)) * up(h)) with the layer's biases."""
        T, sc, K = h.shape[0], self.scratch, self.kernels
        gate, up, act = sc.get("gate", T), sc.get("up", T), sc.get("act", T)  # (T, F)
        gate, up = self._lins((gate, up), h, (L.gate, L.up), L.gate_up, lora, i, _GATE_UP)
        if L.gate_bias is not None:
            gate += L.gate_bias
        if L.up_bias is not None:
            up += L.up_bias
        if self.args.activation == "silu":
            K.silu_mul(act, gate, up)  # not in place: aliased operands defeat vectorization
        else:
            K.gelu(act, gate)
            act *= up
        self._lin(o, act, L.down, lora, (i, "down"))
        if L.down_bias is not None:
            o += L.down_bias

    def _norm_or_copy(self, h: np.ndarray, x: np.ndarray, w: np.ndarray | None) -> None:
        if w is None:
            h[...] = x
        else:
            self.kernels.rms_norm(h, x, w, self.args.rms_norm_eps)

    def _residual(self, h: np.ndarray, x: np.ndarray, o: np.ndarray, w: np.ndarray | None) -> None:
        """x += o, then h = norm(x) (or a copy of x where the block has no pre-norm)."""
        if w is None:
            x += o
            h[...] = x
        else:
            self.kernels.add_rms_norm(h, x, o, w, self.args.rms_norm_eps)

    def _post(self, o: np.ndarray, w: np.ndarray | None) -> None:
        """The branch output before its residual add: post-norm (OLMo 2, Gemma), residual multiplier (Granite)."""
        if w is not None:
            self.kernels.rms_norm(o, o, w, self.args.rms_norm_eps)
        if self.args.residual_scale != 1.0:
            o *= np.float32(self.args.residual_scale)

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
        if self.stream is not None:
            self.stream.enter(residency.HEAD)
        K.matmul(logits, hn, self.lm_head)
        if self.stream is not None:
            self.stream.leave(residency.HEAD)
        if a.logit_scale != 1.0:
            logits *= np.float32(a.logit_scale)
        if a.final_softcap:
            np.tanh(logits / np.float32(a.final_softcap), out=logits)
            logits *= np.float32(a.final_softcap)
        return logits
