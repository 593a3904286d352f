"""LLaMA-family variants (LLaMA 3, Mistral, Qwen2, Phi-3) against transformers' stored outputs.

The fixtures in tests/fixtures/models/variants/ were written by tools/make_variant_fixtures.py
(torch + transformers, random seeded weights, float32): no torch is needed here. Each variant
is loaded from its HF folder and from a packed .modelc; logits must match transformers' to
max|a - b| / max|b| <= 1e-4 and the 16-token greedy continuation must be reproduced exactly.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.artifact.reader import open_artifact
from modelc.formats.detect import read_model
from modelc.ir import DataType, Model, TensorData
from modelc.pack import pack, pack_model
from modelc.request import SamplingParams

VARIANTS = {  # name -> (modelc architecture, what the variant checks)
    "llama3": ("llama", "GQA 4/2, llama3 rope scaling"),
    "llama-bias": ("llama", "attention_bias (q, k, v, o biases), mlp_bias, linear rope scaling 4"),
    "mistral": ("llama", "MQA 4/1, sliding_window 4096 > the sequence"),
    "mistral-swa8": ("llama", "sliding_window 8 < the prompt, head_dim * heads != hidden"),
    "qwen2": ("qwen2", "QKV bias, untied lm_head"),
    "qwen2-tied": ("qwen2", "QKV bias, lm_head tied to the embeddings, rope_theta 1e6"),
    "qwen2-swa": ("qwen2", "use_sliding_window 8 on layer 1 only (max_window_layers 1)"),
    "phi3": ("phi3", "fused qkv_proj and gate_up_proj"),
    "phi3-partial": ("phi3", "fused weights, partial_rotary_factor 0.5"),
    "phi3-longrope": ("phi3", "long-RoPE short factors and attention factor, partial rotary 0.5"),
    "llama32-tied": ("llama", "llama3 rope scaling 32, lm_head tied to the embeddings"),
    "qwen3": ("qwen3", "RMSNorm per head on q and k"),
    "olmo2": ("olmo2", "post-norms only, full-width q/k RMSNorm"),
    "granite": ("granite", "embedding, residual and attention multipliers, logits_scaling"),
    "smollm3": ("smollm3", "a RoPE-less layer every 4 layers"),
    "gemma2": ("gemma2", "sandwich (1+w) norms, GeGLU, attention + final soft-capping, alternating window 4"),
    "gemma3": ("gemma3", "q/k norm, 5 local (window 4, base 1e4) : 1 global (base 1e6, linear 8) layers"),
    "gemma3-mm": ("gemma3", "Gemma3ForConditionalGeneration: language_model.* run text-only, vision tower left out"),
    "mixtral": ("mixtral", "4 experts, top-2 renormalized"),
    "qwen3moe": ("qwen3moe", "q/k norm, 6 experts of width 32, top-2 renormalized"),
    "qwen3moe-mixed": ("qwen3moe", "norm_topk_prob false, decoder_sparse_step 2: a dense layer, then experts"),
    "gpt-oss": ("gpt-oss", "sinks, window 4 / full layers, biases, 4 experts top-2 with clamped SwiGLU, YaRN"),
}
GGUF_ARCH = {"mixtral": "llama"}  # llama.cpp writes Mixtral as a llama with expert tensors
# variants with a llama.cpp-converted F32 GGUF next to the HF folder (tools/make_variant_fixtures.py --gguf)
GGUF_VARIANTS = [
    "phi3-longrope", "llama32-tied", "qwen3", "olmo2", "granite", "smollm3", "gemma2", "gemma3", "mixtral", "qwen3moe",
    "gpt-oss",
]  # fmt: skip
MAX_REL_ERR = 1e-4


@pytest.fixture
def variants_dir(fixtures_dir):
    return fixtures_dir / "models" / "variants"


def _ref(d):
    r = d / "ref"
    return (
        np.load(r / "prompt_ids.npy").tolist(),
        np.load(r / "logits_hf_fp32.npy"),
        np.load(r / "greedy_ids.npy").tolist(),
        json.loads((r / "ref.json").read_text()),
    )


def _rel_err(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def _greedy(eng, ids, n):
    return list(eng.generate_ids(ids, SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)))


def _check(eng, d):
    ids, want, greedy, _ = _ref(d)
    got = eng.logits(ids)
    assert got.shape == want.shape
    assert _rel_err(got, want) <= MAX_REL_ERR
    assert _greedy(eng, ids, len(greedy)) == greedy


@pytest.mark.parametrize("name", list(VARIANTS))
def test_hf_folder_matches_transformers(variants_dir, name):
    d = variants_dir / name
    eng = Engine.load(d / "hf")
    assert eng.architecture == VARIANTS[name][0]
    _check(eng, d)


@pytest.mark.parametrize("name", GGUF_VARIANTS)
def test_gguf_matches_transformers(variants_dir, name):
    """llama.cpp's convert_hf_to_gguf.py output (F32, llama.cpp's tensor names and metadata keys)."""
    d = variants_dir / name
    eng = Engine.load(d / "gguf" / "model-f32.gguf")
    assert eng.architecture == GGUF_ARCH.get(name, VARIANTS[name][0])
    _check(eng, d)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_packed_artifact_matches_transformers(variants_dir, tmp_path, name):
    d = variants_dir / name
    path = pack(d / "hf", out=tmp_path / f"{name}.modelc")
    art = open_artifact(path, verify=True)
    assert art.architecture == VARIANTS[name][0]
    _check(Engine(art), d)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_reference_kernels_match_transformers(variants_dir, monkeypatch, name):
    """The same checks on the numpy twins of the kernels (MODELC_KERNELS=ref)."""
    monkeypatch.setenv("MODELC_KERNELS", "ref")
    eng = Engine.load(variants_dir / name / "hf")
    assert eng.runner.model.kernels.name == "ref"
    _check(eng, variants_dir / name)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_tokenizer_reproduces_prompt_ids(variants_dir, name):
    d = variants_dir / name
    ids, _, _, info = _ref(d)
    assert Engine.load(d / "hf").tokenize(info["prompt"]) == ids


def _perturbed_err(d, **config):
    """Relative logit error vs transformers after overriding normalized config keys (None deletes)."""
    model = read_model(d / "hf")
    for k, v in config.items():
        if v is None:
            model.config.pop(k, None)
        else:
            model.config[k] = v
    ids, want, _, _ = _ref(d)
    return _rel_err(Engine(model).logits(ids), want)


@pytest.mark.parametrize(
    "name,override",
    [
        ("llama3", {"rope_scaling": None}),  # the llama3 frequency bands matter at these positions
        ("llama-bias", {"rope_scaling": None}),  # linear scaling divides every frequency by 4
        ("mistral-swa8", {"sliding_window": None}),  # the window masks real keys of the prompt
        ("phi3-partial", {"partial_rotary_factor": None}),  # rotating every dim is visibly wrong
        ("qwen2-tied", {"rope_theta": 10000.0}),
        ("qwen2-swa", {"sliding_window_layers": None}),  # windowing every layer is wrong
        ("qwen2-swa", {"sliding_window": None}),  # and so is windowing none
        ("phi3-longrope", {"rope_scaling": None}),
        ("phi3-longrope", {"rope_attn_factor": 1.0 + 1e-9}),  # the attention factor alone
        ("qwen3", {"rms_norm_eps": 0.5}),  # the per-head q/k norms see the eps (their weights are random)
        ("olmo2", {"norm_layout": "pre"}),  # (then the pre-norm weights are missing: see below)
        ("granite", {"embedding_multiplier": None}),
        ("granite", {"residual_multiplier": None}),
        ("granite", {"attention_multiplier": None}),
        ("granite", {"logits_scaling": None}),
        ("smollm3", {"rope_layers": None}),
        ("gemma2", {"attn_logit_softcapping": None}),
        ("gemma2", {"final_logit_softcapping": None}),
        ("gemma2", {"sliding_window_layers": None}),
        ("gemma2", {"embedding_multiplier": None}),
        ("gemma3", {"local_rope_theta": None}),
        ("gemma3", {"sliding_window": None}),
        ("gemma3", {"norm_offset": None}),
        ("gemma3", {"attention_multiplier": 0.5}),
        ("mixtral", {"norm_topk_prob": False}),
        ("qwen3moe", {"num_experts_per_tok": 1}),
        ("qwen3moe-mixed", {"norm_topk_prob": True}),
        ("gpt-oss", {"rope_scaling": None}),  # YaRN (and its attention factor)
        ("gpt-oss", {"sliding_window_layers": None}),
    ],
)
def test_fixtures_are_sensitive_to_each_feature(variants_dir, name, override):
    """Each variant's special feature changes the logits far beyond the tolerance, so the checks above bite."""
    from modelc.errors import FormatError

    try:
        err = _perturbed_err(variants_dir / name, **override)
    except FormatError:  # the switch decides which weights are read: without it the model cannot even load
        return
    assert err > 100 * MAX_REL_ERR


def test_config_mapping(variants_dir):
    cfg = {n: read_model(variants_dir / n / "hf").config for n in VARIANTS}
    assert cfg["llama3"]["rope_scaling"]["rope_type"] == "llama3"
    assert cfg["llama3"]["num_key_value_heads"] == 2
    assert cfg["mistral"]["sliding_window"] == 4096
    assert cfg["mistral-swa8"]["sliding_window"] == 8
    assert cfg["mistral-swa8"]["head_dim"] == 16 and cfg["mistral-swa8"]["hidden_size"] == 32
    assert cfg["qwen2-tied"]["tie_word_embeddings"] is True
    assert "lm_head.weight" not in read_model(variants_dir / "qwen2-tied" / "hf").tensors
    assert cfg["qwen2"]["attention_bias"] is True and "sliding_window" not in cfg["qwen2"]
    assert cfg["qwen2-swa"]["sliding_window"] == 8
    assert cfg["qwen2-swa"]["sliding_window_layers"] == [False, True]
    assert cfg["llama-bias"]["attention_bias"] is True
    assert cfg["llama-bias"]["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
    assert cfg["phi3-partial"]["partial_rotary_factor"] == 0.5
    assert all(c["rope_neox"] for c in cfg.values())


@pytest.mark.parametrize("name", ["llama3", "phi3"])
def test_q8_0_pack_stays_close_to_fp32_transformers(variants_dir, tmp_path, name):
    """q8_0 weights vs transformers' fp32 logits: cosine >= 0.99 at every position, same first greedy token."""
    d = variants_dir / name
    res = pack_model(d / "hf", out=tmp_path / "q.modelc", quantize="q8_0")
    art = open_artifact(res.path)
    projections = [n for n in art.tensors if ".layers." in n and n.endswith("proj.weight")]
    assert projections and all(art.tensors[n].dtype == DataType.Q8_0 for n in projections)
    ids, want, greedy, _ = _ref(d)
    got = Engine(art).logits(ids)
    cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cos.min() >= 0.99, cos
    assert _rel_err(got, want) > MAX_REL_ERR  # the weights really are quantized
    assert int(np.argmax(got[-1])) == greedy[0]


@pytest.mark.parametrize("name", ["llama3", "llama-bias", "qwen2"])
@pytest.mark.parametrize("path", ["ref", "blas", "int8"])
def test_q8_0_pack_matches_numpy_reference_on_dequantized_weights(variants_dir, tmp_path, monkeypatch, name, path):
    """The q8_0 artifact's logits vs modelc.models.tiny's float64 numpy forward on its dequantized weights.

    ref (numpy kernels) and blas (numba, dequantize + fp32 BLAS at any T) must match to 1e-4; int8 (numba
    below PREFILL_MIN_T tokens: activations quantized to int8 blocks, as llama.cpp does) to cosine 0.99.
    """
    from modelc.kernels.matmul import plan
    from modelc.kernels.reference.ref_linear import dequantize
    from modelc.models.tiny import reference_logits

    d = variants_dir / name
    ids, _, _, _ = _ref(d)
    if path == "ref":
        monkeypatch.setenv("MODELC_KERNELS", "ref")
    else:
        monkeypatch.setattr(plan, "PREFILL_MIN_T", 1 if path == "blas" else len(ids) + 1)
        monkeypatch.setattr(plan, "AMX_PREFILL_MAX_T", {})  # blas: no int8 tiles in prefill either
        monkeypatch.setattr(plan, "ZMM_PREFILL_MAX_T", {})
        if path == "blas":
            monkeypatch.setenv("MODELC_REPACK", "0")  # else Q8_0 runs gemm_r16's int8 dots at every T
    art = open_artifact(pack(d / "hf", out=tmp_path / "q.modelc", quantize="q8_0"))
    assert art.tensors["model.layers.0.self_attn.q_proj.weight"].dtype == DataType.Q8_0
    tensors = {n: TensorData.from_array(dequantize(t).reshape(t.shape)) for n, t in art.tensors.items()}
    want = reference_logits(Model(art.name, art.architecture, tensors, dict(art.config), naming="hf"), ids)
    got = Engine(art, kv_dtype="f32").logits(ids)  # the kernels, not the KV type (auto: f16 here)
    if path == "int8":
        cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
        assert cos.min() >= 0.99, cos
        assert _rel_err(got, want) > MAX_REL_ERR  # the activations really were quantized
    else:
        assert _rel_err(got, want) <= MAX_REL_ERR


@pytest.mark.parametrize(
    "extra,want_window,want_layers",
    [
        ({}, None, None),  # use_sliding_window false: the window is not used
        ({"use_sliding_window": True}, None, None),  # max_window_layers defaults to 28 >= 4 layers: none slide
        ({"use_sliding_window": True, "max_window_layers": 0}, 8, None),  # every layer slides
        ({"use_sliding_window": True, "max_window_layers": 3}, 8, [False, False, False, True]),
        ({"use_sliding_window": True, "layer_types": ["sliding_attention", "full_attention"] * 2}, 8,
         [True, False, True, False]),
    ],
)  # fmt: skip
def test_qwen2_sliding_window_layers(extra, want_window, want_layers):
    """transformers' Qwen2 rule (transformers 4 configs have no layer_types): layers >= max_window_layers slide."""
    from modelc.formats.hf_config import normalize_config

    _, cfg = normalize_config({"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 8, **extra})
    assert cfg.get("sliding_window") == want_window
    assert cfg.get("sliding_window_layers") == want_layers


def test_other_mlp_activation_is_refused(variants_dir):
    """The llama-family MLP is SwiGLU: a config asking for another activation must not run silently wrong."""
    from modelc.errors import UnsupportedError

    model = read_model(variants_dir / "llama3" / "hf")
    model.config["hidden_act"] = "gelu"
    with pytest.raises(UnsupportedError, match="hidden_act 'gelu'"):
        Engine(model)


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "name", ["llama3", "mistral-swa8", "qwen2-swa", "phi3", "gemma2", "gemma3", "qwen3moe", "gpt-oss"]
)
async def test_batched_serving_reproduces_greedy(variants_dir, name):
    """Three concurrent requests through AsyncEngine (scheduler + runner actors), 8-token steps: chunked
    prefill across KV blocks and windows, decodes batched with other sequences' prefill, prefix-cache hits."""
    import anyio

    from modelc.api.async_engine import AsyncEngine
    from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
    from modelc.request import TokenEvent

    d = variants_dir / name
    ids, _, greedy, _ = _ref(d)
    cfg = EngineConfig(
        engines=1, threads=1, cpu_count=2, request_timeout_s=60,
        cache=CacheConfig(kv_cache_tokens=512), scheduler=SchedulerConfig(max_num_seqs=4, max_batch_tokens=8),
    )  # fmt: skip
    params = SamplingParams(temperature=0.0, max_tokens=len(greedy), ignore_eos=True)
    outs: dict[int, list[int]] = {}

    async def one(eng, k):
        outs[k] = [ev.token_id async for ev in eng.generate(ids, params) if isinstance(ev, TokenEvent)]

    async with AsyncEngine.open(read_model(d / "hf"), cfg) as eng:
        async with anyio.create_task_group() as tg:
            for k in range(3):
                tg.start_soon(one, eng, k)
        stats = eng.stats()
    assert outs == {k: greedy for k in range(3)}
    assert stats["prefix_hits"] > 0


@pytest.mark.parametrize(
    "arch,layers,want", [("gemma2", 46, 168**-0.5), ("gemma3", 62, 168**-0.5), ("gemma3", 34, None)]
)
def test_gemma_27b_gguf_attention_scale(arch, layers, want):
    """llama.cpp's rule for GGUF Gemma (the file has no query_pre_attn_scalar): hidden / heads for the 27B models."""
    from modelc.formats.gguf_arch import layer_rules

    cfg = {"num_hidden_layers": layers, "hidden_size": 5376, "num_attention_heads": 32}
    layer_rules(cfg, arch, {})
    assert cfg.get("attention_multiplier") == want


def test_gemma3_multimodal_config_diffed_against_text_defaults():
    """A transformers 4 gemma-3-4b-it style config.json: text_config holds only what differs from
    Gemma3TextConfig's defaults; the rest (head_dim 256, query_pre_attn_scalar 256, the 5:1 window pattern,
    the two RoPE bases) comes from those defaults."""
    from modelc.formats.hf_config import normalize_config

    arch, cfg = normalize_config({
        "model_type": "gemma3",
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                        "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
        "vision_config": {"model_type": "siglip_vision_model"},
    })  # fmt: skip
    assert arch == "gemma3" and cfg["head_dim"] == 256 and cfg["num_attention_heads"] == 8
    assert cfg["attention_multiplier"] == 256**-0.5 and cfg["embedding_multiplier"] == 2560**0.5
    assert cfg["sliding_window"] == 1024 and cfg["sliding_window_layers"][:6] == [True] * 5 + [False]
    assert cfg["rope_theta"] == 1e6 and cfg["local_rope_theta"] == 1e4
    assert cfg["rope_scaling"] == {"rope_type": "linear", "factor": 8.0}


@pytest.mark.parametrize("name", ["gemma2", "gpt-oss"])
def test_softcap_and_sinks_kernel_kv_types(variants_dir, name):
    """The soft-capping/sinks attention reads f16 pages (same greedy tokens) and refuses the q8_0/mixed caches."""
    from modelc.engine.runner import Runner
    from modelc.errors import UnsupportedError

    d = variants_dir / name
    ids, want, greedy, _ = _ref(d)
    model = read_model(d / "hf")
    with pytest.raises(UnsupportedError, match="kv cache dtype q8_0"):
        Runner(model, num_kv_blocks=8, kv_dtype="q8_0")
    assert _greedy(Engine(model, kv_dtype="float16"), ids, len(greedy)) == greedy


@pytest.mark.parametrize("source", ["hf", "gguf/model-f32.gguf"])
def test_longrope_long_factors_past_the_original_context(variants_dir, source):
    """phi3-longrope (original context 64): an 80-token prompt rotates every position with the long factors
    (transformers' rule: the forward's length decides), from config.json's long_factor and from GGUF's
    rope_factors_long; decoding after it (KV cache, every key long) equals full recomputes. A 58-token prompt
    stays short while decoding past position 64 (the prompt's length decides in the engines), which is
    transformers' continuation up to the crossing; there transformers' Phi-3 generate() drops its cache and
    recomputes every key with the long factors (docs/models.md)."""
    d = variants_dir / "phi3-longrope"
    ref = np.load(d / "ref" / "long.npz")
    eng = Engine.load(d / source)
    long_ids = ref["long_ids"].tolist()
    assert _rel_err(eng.logits(long_ids), ref["long_logits"]) <= MAX_REL_ERR
    # the first 64 positions alone stay within the original context: short factors, other logits
    assert _rel_err(eng.logits(long_ids[:64]), ref["long_logits"][:64]) > 1e-2
    seq = list(long_ids)
    for _ in range(4):
        seq.append(int(eng.logits(seq)[-1].argmax()))
    assert _greedy(eng, long_ids, 4) == seq[80:]
    crossed = _greedy(eng, ref["cross_ids"].tolist(), 12)
    assert crossed[:8] == ref["cross_greedy"].tolist()[:8]  # through the step at position 64


@pytest.mark.anyio
async def test_longrope_served_long_and_short_prompts_share_no_blocks(variants_dir):
    """Through AsyncEngine (8-token chunked prefill): an 80-token prompt is rotated long in every chunk and a
    64-token prompt with the same first 64 tokens stays short; the prefix cache does not hand the short
    prompt's blocks to the long one (its blocks are salted), so each reproduces its own full recompute."""
    from modelc.api.async_engine import AsyncEngine
    from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
    from modelc.request import Finished, TokenEvent

    d = variants_dir / "phi3-longrope"
    long_ids = np.load(d / "ref" / "long.npz")["long_ids"].tolist()
    eng_sync = Engine.load(d / "hf")
    want = {}
    for n in (64, 80):
        row = eng_sync.logits(long_ids[:n])[-1].astype(np.float64)
        want[n] = float(row.max() - np.log(np.exp(row - row.max()).sum()) - row.max())  # top-1 logprob
    cfg = EngineConfig(
        engines=1, threads=1, cpu_count=2, request_timeout_s=60,
        cache=CacheConfig(kv_cache_tokens=512), scheduler=SchedulerConfig(max_num_seqs=4, max_batch_tokens=8),
    )  # fmt: skip
    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True, logprobs=True)
    got, cached = {}, {}
    async with AsyncEngine.open(read_model(d / "hf"), cfg) as eng:
        for n in (64, 80, 80):  # the short prompt first: its blocks are cached when the long ones arrive
            async for ev in eng.generate(long_ids[:n], params):
                if isinstance(ev, TokenEvent):
                    got[n] = ev.logprob
                elif isinstance(ev, Finished):
                    cached[n] = ev.cached_tokens
    assert got == pytest.approx(want, abs=1e-4)
    assert cached[80] == 64  # the second long prompt reuses the first one's blocks, not the short one's
