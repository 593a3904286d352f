"""KernelSet: the kernels a model runs on, numba (default) or the numpy references (MODELC_KERNELS=ref).

Models call kernels only through a KernelSet, so a numerical bug is one env var away
from a bisection between reference and numba.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from modelc.errors import InvalidRequestError


@dataclass(frozen=True, slots=True)
class KernelSet:
    name: str  # "numba" | "ref"
    rms_norm: Callable
    add_rms_norm: Callable
    layer_norm: Callable
    rope: Callable
    silu_mul: Callable
    gelu: Callable
    gelu_erf: Callable
    softmax: Callable
    kv_write: Callable
    paged_attention: Callable
    matmul: Callable  # (out (T, N), x (T, C), w: Weight) -> None
    dequantize: Callable  # (TensorData) -> (rows, cols) f32
    dequantize_rows: Callable  # (TensorData, row_ids) -> (n, cols) f32
    # paged attention with Gemma 2's logit soft-capping and gpt-oss's sinks (kernels/attention/attention_ext.py)
    paged_attention_ext: Callable
    moe_ffn: Callable  # (out (T, C), x (T, C), logits (T, E), MoeExperts, k, normalize) -> None


def kernel_set(name: str | None = None) -> KernelSet:
    """The kernels named `name`, else by MODELC_KERNELS ("ref" -> numpy references; anything else -> numba)."""
    if name is None:
        name = "ref" if os.environ.get("MODELC_KERNELS", "").lower() == "ref" else "numba"
    if name == "ref":
        from modelc.kernels.reference import ref, ref_moe
        from modelc.kernels.reference.ref_attention_ext import paged_attention_ext as ref_attention_ext

        return KernelSet(
            "ref",
            ref.rms_norm,
            ref.add_rms_norm,
            ref.layer_norm,
            ref.rope,
            ref.silu_mul,
            ref.gelu,
            ref.gelu_erf,
            ref.softmax,
            ref.kv_write,
            ref.paged_attention,
            ref.matmul,
            ref.dequantize,
            ref.dequantize_rows,
            ref_attention_ext,
            ref_moe.moe_ffn,
        )
    if name != "numba":
        raise InvalidRequestError(f"unknown kernel set {name!r} (use 'numba' or 'ref')")
    from modelc.kernels.attention import attention, attention_ext, kv_write
    from modelc.kernels.elementwise import activation, norm, rope
    from modelc.kernels.layer import moe_ffn
    from modelc.kernels.matmul import linear

    return KernelSet(
        "numba",
        norm.rms_norm,
        norm.add_rms_norm,
        norm.layer_norm,
        rope.rope,
        activation.silu_mul,
        activation.gelu,
        activation.gelu_erf,
        activation.softmax,
        kv_write.write_pages,
        attention.paged_attention_auto,
        linear.matmul,
        linear.dequantize,
        linear.dequantize_rows,
        attention_ext.paged_attention_ext,
        moe_ffn.moe_ffn,
    )
