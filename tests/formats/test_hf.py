from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from modelc.errors import FormatError, UnsupportedError
from modelc.formats.hf import read_hf
from modelc.formats.hf_config import normalize_config

from .torch_factory import write_checkpoint

LLAMA_CONFIG = {
    "model_type": "llama",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "vocab_size": 8,
    "bos_token_id": 0,
    "eos_token_id": 1,
}
_ADDED = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
_BOS_A = [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
TOKENIZER = {  # a tokenizer.json the tokenizers library reads (pack refuses one it does not)
    "version": "1.0",
    "added_tokens": [
        {"id": 0, "content": "<s>", "special": True, **_ADDED},
        {"id": 1, "content": "</s>", "special": True, **_ADDED},
        {"id": 2, "content": "<|eot_id|>", "special": True, **_ADDED},
    ],
    "post_processor": {
        "type": "TemplateProcessing",
        "single": _BOS_A,
        "pair": _BOS_A,
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}},
    },
    "model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1, "<|eot_id|>": 2, "a": 3}, "merges": []},
}


def make_folder(tmp_path, *, config=LLAMA_CONFIG, tok_cfg=None, gen=None, weights="safetensors"):
    d = tmp_path / "my-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    (d / "tokenizer.json").write_text(json.dumps(TOKENIZER))
    (d / "tokenizer_config.json").write_text(json.dumps(tok_cfg or {"bos_token": "<s>", "eos_token": "</s>"}))
    if gen is not None:
        (d / "generation_config.json").write_text(json.dumps(gen))
    arrays = {
        "model.embed_tokens.weight": np.ones((8, 16), np.float32),
        "model.norm.weight": np.ones(16, np.float32),
    }
    if weights == "safetensors":
        save_file(arrays, str(d / "model.safetensors"))
    elif weights == "sharded":
        save_file({"model.embed_tokens.weight": arrays["model.embed_tokens.weight"]}, str(d / "a.safetensors"))
        save_file({"model.norm.weight": arrays["model.norm.weight"]}, str(d / "b.safetensors"))
        wm = {"model.embed_tokens.weight": "a.safetensors", "model.norm.weight": "b.safetensors"}
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    elif weights == "pytorch":
        write_checkpoint(d / "pytorch_model.bin", arrays)
    return d


@pytest.mark.parametrize("weights", ["safetensors", "sharded", "pytorch"])
def test_folder(tmp_path, weights):
    gen = {"eos_token_id": [1, 2], "temperature": 0.6, "_from_model_config": True, "transformers_version": "x"}
    m = read_hf(make_folder(tmp_path, weights=weights, gen=gen))
    assert m.name == "my-model" and m.architecture == "llama" and m.naming == "hf" and m.source_format == "hf"
    c = m.config
    assert c["rope_theta"] == 500000.0 and c["rope_neox"] is True and c["head_dim"] == 8
    assert c["rope_scaling"]["rope_type"] == "llama3" and c["rope_scaling"]["factor"] == 8.0
    assert c["tie_word_embeddings"] is True  # no lm_head.weight stored
    assert set(m.tensors) == {"model.embed_tokens.weight", "model.norm.weight"}
    sp = m.special_tokens
    assert sp["eos_token_ids"] == [1, 2] and sp["bos_token_id"] == 0 and sp["eot_token_id"] == 2
    assert sp["add_bos_token"] is True and sp["bos_token"] == "<s>" and sp["eos_token"] == "</s>"
    assert m.generation_config == {"eos_token_id": [1, 2], "temperature": 0.6}
    assert json.loads(m.tokenizer_json)["model"]["vocab"]["a"] == 3


def test_chat_template_list_and_string(tmp_path):
    tpl = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    m = read_hf(make_folder(tmp_path, tok_cfg={"chat_template": tpl, "add_bos_token": False}))
    assert m.chat_template == "D" and m.special_tokens["add_bos_token"] is False
    d = tmp_path / "my-model"
    (d / "chat_template.jinja").write_text("J")
    assert read_hf(d).chat_template == "J"


def test_sentence_transformers_pooling(tmp_path):
    cfg = {
        "model_type": "bert",
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "layer_norm_eps": 1e-12,
        "vocab_size": 8,
    }
    d = make_folder(tmp_path, config=cfg)
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})
    )
    modules = [
        {"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (d / "modules.json").write_text(json.dumps(modules))
    (d / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    m = read_hf(d)
    assert m.architecture == "bert" and m.config["pooling"] == {"mode": "cls", "normalize": True}
    assert m.config["max_seq_length"] == 128 and m.config["model_type"] == "bert"
    assert m.config["layer_norm_eps"] == 1e-12


@pytest.mark.parametrize(
    ("cfg", "arch"),
    [
        ({"model_type": "mistral"}, "llama"),
        ({"model_type": "qwen2"}, "qwen2"),
        ({"model_type": "phi3"}, "phi3"),
        ({"model_type": "xlm-roberta"}, "bert"),
        (
            {
                "model_type": "gpt2",
                "n_embd": 64,
                "n_layer": 2,
                "n_head": 4,
                "n_positions": 512,
                "layer_norm_epsilon": 1e-5,
            },
            "gpt2",
        ),
    ],
)
def test_architectures(cfg, arch):
    got, out = normalize_config(cfg)
    assert got == arch
    if arch == "qwen2":
        assert out["attention_bias"] is True and out["rope_neox"] is True
        assert normalize_config({"model_type": "qwen2", "sliding_window": 4096})[1].get("sliding_window") is None
    if arch == "llama":
        assert normalize_config({"model_type": "mistral", "sliding_window": 4096})[1]["sliding_window"] == 4096
    if arch == "gpt2":
        assert out["hidden_size"] == 64 and out["intermediate_size"] == 256 and out["layer_norm_eps"] == 1e-5
        assert out["max_position_embeddings"] == 512 and out["tie_word_embeddings"] is True


def test_transformers5_rope_parameters():
    _, out = normalize_config(
        {"model_type": "llama", "rope_parameters": {"rope_theta": 1e6, "rope_type": "linear", "factor": 2.0}}
    )
    assert out["rope_theta"] == 1e6 and out["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}


def test_bad_folders(tmp_path):
    with pytest.raises(FormatError, match="no config.json"):
        read_hf(tmp_path)
    with pytest.raises(UnsupportedError, match="model_type 'mamba'"):
        read_hf(make_folder(tmp_path, config={"model_type": "mamba"}))
    d = tmp_path / "my-model"
    (d / "config.json").write_text("{not json")
    with pytest.raises(FormatError, match="config.json: not valid JSON"):
        read_hf(d)
    (d / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (d / "model.safetensors").unlink()
    with pytest.raises(FormatError, match="no weights found"):
        read_hf(d)


def test_sharded_pytorch_bins_and_folder_names(tmp_path):
    d = make_folder(tmp_path, weights="none")
    write_checkpoint(
        d / "pytorch_model-00001-of-00002.bin", {"model.embed_tokens.weight": np.ones((8, 16), np.float32)}
    )
    write_checkpoint(d / "pytorch_model-00002-of-00002.bin", {"model.norm.weight": np.ones(16, np.float32)})
    wm = {
        "model.embed_tokens.weight": "pytorch_model-00001-of-00002.bin",
        "model.norm.weight": "pytorch_model-00002-of-00002.bin",
    }
    (d / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wm}))
    m = read_hf(d)
    assert set(m.tensors) == set(wm) and m.name == "my-model"
    snap = tmp_path / "models--org--cool-model" / "snapshots" / "abc123"
    snap.parent.mkdir(parents=True)
    d.rename(snap)
    assert read_hf(snap).name == "cool-model"


def test_real_tiny_llama_folder(shared_fixtures):
    m = read_hf(shared_fixtures / "models" / "tiny-llama" / "hf")
    assert (
        m.name == "tiny-llama"
        and m.architecture == "llama"
        and m.config["num_key_value_heads"] == 2
        and m.config["head_dim"] == 16
    )
    assert m.config["rope_theta"] == 10000.0 and m.config["tie_word_embeddings"] is False
    assert m.special_tokens["bos_token_id"] == 1 and m.special_tokens["eos_token_ids"] == [2]
    assert m.special_tokens["add_bos_token"] is True
    assert m.tensors["model.embed_tokens.weight"].shape == (32000, 64)


@pytest.mark.parametrize(
    "bad",
    [
        {"num_hidden_layers": "2"},
        {"hidden_size": -4},
        {"rms_norm_eps": "tiny"},
        {"vocab_size": True},
        {"max_position_embeddings": 0.5},
    ],
)
def test_config_value_types_are_checked(bad):
    with pytest.raises(FormatError, match="config.json"):
        normalize_config({"model_type": "llama", **bad})


@pytest.mark.parametrize(
    ("file", "content", "words"),
    [
        ("tokenizer.json", b"[1, 2]", "tokenizer.json: not a JSON object"),
        ("tokenizer.json", b"{}", "tokenizer.json: not a tokenizer the tokenizers library reads"),
        ("tokenizer.json", b'{"model": {"type": "Nope"}}', "not a tokenizer the tokenizers library reads"),
        ("tokenizer.json", b'"\xff"', "tokenizer.json: not UTF-8 text"),
        ("chat_template.jinja", b"\xff\xfe{{ x }}", "chat_template.jinja: not UTF-8 text"),
        ("tokenizer_config.json", b"[1]", "tokenizer_config.json: not a JSON object"),
        ("generation_config.json", b"[1]", "generation_config.json: not a JSON object"),
    ],
)
def test_malformed_side_files_are_one_format_error(tmp_path, file, content, words):
    """Each was an AttributeError or UnicodeDecodeError (`error: internal error: ...` in the CLI), or packed a
    model whose tokenizer then failed to load."""
    d = make_folder(tmp_path)
    (d / file).write_bytes(content)
    with pytest.raises(FormatError, match=words):
        read_hf(d)
