"""models/residency.py: resident or streamed, decided from the memory left; the clear error where even one layer
does not fit; the plan recorded per source."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.config import EngineConfig
from modelc.errors import InvalidRequestError, MemoryLimitError
from modelc.ir import DataType, Model, TensorData
from modelc.models import residency

MIB = 1 << 20


def _source(layers: int = 4, layer_mib: int = 100, head_mib: int = 50, arch: str = "llama", naming: str = "gguf"):
    """A model whose tensors only have sizes (Q8_0 blocks of 34 bytes per 32 values: rows x 34 bytes)."""

    def t(mib: int) -> TensorData:
        rows = mib * MIB // 34
        return TensorData((rows, 32), DataType.Q8_0, np.broadcast_to(np.uint8(0), (rows * 34,)))  # no memory

    names = {"gguf": ("blk.{}.attn_q.weight", "blk.{}.ffn_up.weight", "output.weight", "blk.{}.attn_norm.weight"),
             "hf": ("model.layers.{}.self_attn.q_proj.weight", "model.layers.{}.mlp.up_proj.weight", "lm_head.weight",
                    "model.layers.{}.input_layernorm.weight")}[naming]  # fmt: skip
    tensors = {}
    for i in range(layers):
        tensors[names[0].format(i)] = t(layer_mib // 2)
        tensors[names[1].format(i)] = t(layer_mib - layer_mib // 2)
        tensors[names[3].format(i)] = TensorData.from_array(np.ones(8, np.float32))  # a vector: in no group
    tensors[names[2]] = t(head_mib)
    return Model("m", arch, tensors, {"num_hidden_layers": layers}, naming=naming)


def test_groups_are_the_layers_in_order_then_the_output_projection():
    for naming in ("gguf", "hf"):
        src = _source(layers=3, naming=naming)
        gs = residency.groups(src)
        assert list(gs) == [0, 1, 2, residency.HEAD]
        assert all(len(names) == 2 for g, names in gs.items() if g != residency.HEAD)
        sizes = residency.group_bytes(src)
        assert abs(sizes[0] - 100 * MIB) < 100 and abs(sizes[residency.HEAD] - 50 * MIB) < 100


def test_auto_is_resident_where_the_weights_kv_and_reserve_fit():
    src = _source()  # 450 MiB of weights
    need = residency.weights_bytes(src) + 64 * MIB + residency.RESERVE_BYTES
    plan = residency.decide(src, "auto", kv_bytes=64 * MIB, available_bytes=need)
    assert plan.mode == residency.RESIDENT and "fits" in plan.reason
    assert residency.decide(src, "auto", available_bytes=None).mode == residency.RESIDENT  # unknown: as before


def test_auto_streams_what_does_not_fit_within_the_memory_left_after_kv_and_reserve():
    src = _source()
    avail = residency.RESERVE_BYTES + 64 * MIB + 250 * MIB
    plan = residency.decide(src, "auto", kv_bytes=64 * MIB, available_bytes=avail)
    assert plan.mode == residency.STREAMED
    assert plan.budget_bytes == 250 * MIB and plan.largest_group_bytes >= 99 * MIB
    assert "streamed" in plan.describe()["mode"] and "page budget" in plan.reason


def test_streamed_when_asked_even_where_resident_fits():
    src = _source()
    plan = residency.decide(src, "streamed", available_bytes=100 << 30)
    assert plan.mode == residency.STREAMED and plan.budget_bytes == residency.weights_bytes(src)


def test_a_layer_that_does_not_fit_is_a_clear_error():
    src = _source(layer_mib=300)
    avail = residency.RESERVE_BYTES + 200 * MIB
    with pytest.raises(
        MemoryLimitError, match=r"leaving 0\.20 GiB for its weights, less than its largest layer \(0\.29 GiB\)"
    ):
        residency.decide(src, "auto", available_bytes=avail)
    with pytest.raises(MemoryLimitError, match="even streamed"):
        residency.decide(src, "streamed", available_bytes=avail)


def test_streaming_is_for_the_llama_family_and_one_engine():
    small = residency.RESERVE_BYTES + 200 * MIB
    with pytest.raises(MemoryLimitError, match="llama family only"):
        residency.decide(_source(arch="gpt2"), "auto", available_bytes=small)
    with pytest.raises(MemoryLimitError, match="one engine"):
        residency.decide(_source(), "streamed", engines=2, available_bytes=small)


def test_the_budget_override_only_lowers_the_budget(monkeypatch):
    src = _source()
    monkeypatch.setenv("MODELC_STREAM_BUDGET_MB", "120")
    assert residency.decide(src, "streamed", available_bytes=100 << 30).budget_bytes == 120 * MIB
    monkeypatch.setenv("MODELC_STREAM_BUDGET_MB", "90")  # below the largest layer: the clear error
    with pytest.raises(MemoryLimitError):
        residency.decide(src, "streamed", available_bytes=100 << 30)


def test_bad_modes_are_refused():
    with pytest.raises(InvalidRequestError, match="weights mode"):
        residency.parse_mode("mlock")
    with pytest.raises(InvalidRequestError, match="weights must be one of"):
        EngineConfig(weights="mmap")
    assert residency.parse_mode(None) == residency.AUTO and residency.parse_mode("Streamed") == residency.STREAMED


def test_the_plan_is_recorded_per_source_and_dropped_with_it():
    src, other = _source(), _source()
    plan = residency.decide(src, "streamed", available_bytes=100 << 30)
    residency.assign(src, plan)
    assert residency.plan_for(src) is plan and residency.streamed(src)
    assert residency.plan_for(other) is None and not residency.streamed(other)
    key = id(src)
    del src
    import gc

    gc.collect()
    assert key not in residency._PLANS


def test_a_plan_is_only_given_for_the_object_it_was_assigned_to():
    """A source that takes no weak reference (a slotted plain object) keeps its plan, and another object never
    inherits it: the entry checks identity, not only id()."""

    class Slotted:
        __slots__ = ("tensors", "name")

    src = Slotted()
    plan = residency.decide(_source(), "streamed", available_bytes=100 << 30)
    residency.assign(src, plan)
    assert residency.plan_for(src) is plan
    ref, _ = residency._PLANS[id(src)]
    residency._PLANS[id(src)] = (lambda: object(), plan)  # as if the id now named another object
    assert residency.plan_for(src) is None
    residency._PLANS[id(src)] = (ref, plan)
