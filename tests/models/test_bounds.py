"""Config counts are checked against the tensors present before a model allocates from them."""

from __future__ import annotations

import pytest

from modelc.errors import FormatError
from modelc.models.bounds import check_counts
from modelc.models.registry import build_model
from modelc.models.tiny import make_tiny_llama


def with_config(model, **changes):
    model.config = {**model.config, **changes}
    return model


def test_tiny_model_passes() -> None:
    check_counts(make_tiny_llama())


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("num_hidden_layers", 10**9, "num_hidden_layers = 1000000000 but the weights hold 2 layers"),
        ("num_attention_heads", 1 << 20, "num_attention_heads x head_dim"),
        ("num_key_value_heads", 1 << 24, "num_key_value_heads x head_dim"),
        ("vocab_size", 1 << 30, "vocab_size"),
        ("intermediate_size", 1 << 30, "intermediate_size"),
        ("max_position_embeddings", 1 << 40, "max_position_embeddings"),
        ("num_hidden_layers", -3, "not a positive integer"),
        ("hidden_size", "64; x", "not a positive integer"),
    ],
)
def test_hostile_counts_refused_before_allocating(key, value, match) -> None:
    model = with_config(make_tiny_llama(), **{key: value})
    with pytest.raises(FormatError, match=match):
        check_counts(model)
    with pytest.raises(FormatError):  # build_model checks first: no per-layer list of 1e9 entries
        build_model(model)


def test_encoder_counts_checked_too() -> None:
    from modelc.models.bert import BertModel
    from tests.models.test_bert import tiny_bert

    model = tiny_bert()
    check_counts(model)
    model.config = {**model.config, "hidden_size": 1 << 40}
    with pytest.raises(FormatError, match="not a positive integer|hidden_size"):
        BertModel(model)


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("rope_theta", float("nan"), "rope_theta must be a finite number, got nan"),
        ("rope_theta", -10000.0, "rope_theta must be > 0, got -10000"),
        ("rms_norm_eps", -1e-5, "rms_norm_eps"),  # check_counts says it first, for every family
        ("rms_norm_eps", float("inf"), "rms_norm_eps"),
        ("final_logit_softcapping", float("-inf"), "final_logit_softcapping must be a finite number"),
        ("logits_scaling", float("nan"), "logits_scaling must be a finite number"),
    ],
)
def test_non_finite_or_out_of_range_config_floats_are_refused(tmp_path, key, value, match) -> None:
    """A NaN RoPE base (a GGUF's rope.freq_base, or NaN in a config.json, which Python's json reads) packed and
    loaded, and every logit came out NaN; the model is refused at pack and at load instead."""
    from modelc.artifact.writer import write_artifact
    from modelc.pack import pack_model

    model = with_config(make_tiny_llama(), **{key: value})
    with pytest.raises(FormatError, match=match):
        build_model(model)
    src = write_artifact(model, tmp_path / "bad.modelc")
    with pytest.raises(FormatError, match=match):
        pack_model(src, out=tmp_path / "out.modelc")


@pytest.mark.parametrize("value", ["1e-5; x", float("nan"), -1e-5, True])
def test_every_family_refuses_a_bad_norm_epsilon(value) -> None:
    """GPT-2 took layer_norm_eps as float(...) unchecked: 'x' was a ValueError (an internal error), NaN or a
    negative epsilon loaded and made every output NaN. check_counts checks it for every family."""
    from modelc.models.bert import BertModel
    from modelc.models.tiny import make_tiny_gpt2
    from tests.models.test_bert import tiny_bert

    for make, key, build in ((make_tiny_gpt2, "layer_norm_eps", build_model), (tiny_bert, "layer_norm_eps", BertModel),
                             (make_tiny_llama, "rms_norm_eps", build_model)):  # fmt: skip
        model = with_config(make(), **{key: value})
        with pytest.raises(FormatError, match=f"{key} = .* is not a finite number >= 0"):
            build(model)
