"""Write tests/fixtures/models/variants/: tiny random LLaMA-family models with transformers' reference outputs.

Dev-only tool (needs torch + transformers, which modelc never imports); run it in a
reference venv, e.g.

    /work/refvenv-st/bin/python tools/make_variant_fixtures.py --out tests/fixtures/models/variants

For each variant (LLaMA-3 rope scaling + GQA; LLaMA with attention/MLP biases and
linear rope scaling; Mistral with and without an active sliding window; Qwen2 with
tied and untied embeddings and with per-layer sliding windows; Phi-3 with full and
partial rotary) it writes NAME/hf/ (config.json, model.safetensors in float32, a
tiny byte-level BPE tokenizer.json shared by all variants, tokenizer_config.json,
generation_config.json) and NAME/ref/:

- prompt_ids.npy: the prompt's token ids (BOS first), int32;
- logits_hf_fp32.npy: transformers' float32 logits at every prompt position (T, V);
- greedy_ids.npy: model.generate(do_sample=False) continuation (16 tokens), int32;
- ref.json: the same ids, the top-2 margins of every greedy step, versions and notes.

Weights are drawn from a seeded normal with a larger std than transformers' default
(biases and norm weights randomized too, so every tensor mapping matters). A seed is
rejected (and the next one tried) unless every greedy step's top-2 logit margin is
above MARGIN, the continuation has no EOS, and generate() (KV cache) agrees with a
cache-free argmax loop.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil

import numpy as np
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB = 320
BOS, EOS = "<s>", "</s>"
SPECIALS = [BOS, EOS, "<|im_start|>", "<|im_end|>"]
NUM_NEW = 16
MARGIN = 5e-3  # far above the ~1e-5 logit differences between engines
MAX_SEEDS = 50

CORPUS = [
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch.",
    "In the beginning the river was small, but the spring rains made it wide and fast.",
    "Numbers such as 12, 345 and 6789 appear in tables, receipts and train timetables.",
    "She packed bread, cheese, apples and a thermos of tea before walking up the hill.",
    "Compilers turn source code into machine instructions; interpreters run it directly.",
    "The weather today is cloudy with a chance of rain in the afternoon and evening.",
    "A small model with random weights produces gibberish, yet its arithmetic must be exact.",
    "Every morning the baker lights the oven, kneads the dough and shapes the loaves.",
]
PROMPT = "The farmer packed bread and cheese for the hill."

COMMON = dict(
    vocab_size=VOCAB,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=None,
    num_hidden_layers=2,
)


def variants() -> dict[str, tuple[type, dict]]:
    """name -> (transformers config class, config kwargs)."""
    t = transformers
    return {
        # LLaMA 3: GQA (4 query heads on 2 KV heads) and llama3 rope scaling; original context 64 so
        # that, at head_dim 16, the frequencies fall in all three bands (kept, smoothed, divided by 8)
        "llama3": (t.LlamaConfig, dict(
            hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        )),
        # LLaMA with attention_bias (q, k, v and o_proj biases), mlp_bias (gate, up, down biases) and
        # linear rope scaling (LLaMA 2 long-context finetunes)
        "llama-bias": (t.LlamaConfig, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
            rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        )),
        # Mistral with a sliding window longer than anything the test runs: full causal attention
        "mistral": (t.MistralConfig, dict(
            hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
            sliding_window=4096, tie_word_embeddings=False,
        )),
        # Mistral with a window shorter than the prompt (the window itself is checked);
        # head_dim * heads (64) != hidden_size (32), as in Mistral Nemo
        "mistral-swa8": (t.MistralConfig, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            sliding_window=8, tie_word_embeddings=False,
        )),
        # Qwen2: QKV biases, lm_head tied to the embeddings, rope_theta 1e6
        "qwen2-tied": (t.Qwen2Config, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )),
        "qwen2": (t.Qwen2Config, dict(
            hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            tie_word_embeddings=False,
        )),
        # Qwen2 with use_sliding_window: only layers >= max_window_layers (here layer 1 of 2) slide
        "qwen2-swa": (t.Qwen2Config, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            use_sliding_window=True, sliding_window=8, max_window_layers=1, tie_word_embeddings=False,
        )),
        # Phi-3: fused qkv_proj and gate_up_proj
        "phi3": (t.Phi3Config, dict(
            hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            tie_word_embeddings=False, sliding_window=None,
        )),
        # Phi-4-mini style: phi3 with partial rotary (only the first half of each head rotates)
        "phi3-partial": (t.Phi3Config, dict(
            hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            partial_rotary_factor=0.5, tie_word_embeddings=False, sliding_window=None,
        )),
        # Phi-3.5/Phi-4 long-RoPE: short factors (the prompt is within the original 64 positions) and the
        # attention factor sqrt(1 + ln 8 / ln 64) on the rotated dims only (partial rotary 0.5)
        "phi3-longrope": (t.Phi3Config, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
            partial_rotary_factor=0.5, tie_word_embeddings=False, sliding_window=None,
            original_max_position_embeddings=64,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 64,
                             "short_factor": [1.0, 1.5, 3.0, 6.0], "long_factor": [1.0, 2.0, 8.0, 16.0]},
        )),
        # Llama 3.2: llama3 rope scaling with lm_head tied to the embeddings
        "llama32-tied": (t.LlamaConfig, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        )),
        # Qwen3: RMSNorm on each head of q and k before RoPE, no biases
        "qwen3": (t.Qwen3Config, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )),
        # OLMo 2: norms after attention and FFN (no pre-norms), RMSNorm over the full q and k width
        "olmo2": (t.Olmo2Config, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            tie_word_embeddings=False,
        )),
        # Granite: embedding, residual and attention multipliers, logits divided by logits_scaling
        "granite": (t.GraniteConfig, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
            tie_word_embeddings=False, embedding_multiplier=6.0, residual_multiplier=0.5,
            attention_multiplier=0.15, logits_scaling=4.0,
        )),
        # Gemma 2: sandwich norms with (1 + w), sqrt(hidden) embedding scale, GeGLU (tanh GELU), attention and
        # final logit soft-capping (small caps so they bite at these logit sizes), layer 0 slides over 4
        # positions and layer 1 is global; query_pre_attn_scalar = head_dim (llama.cpp assumes it below 27B)
        "gemma2": (t.Gemma2Config, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            query_pre_attn_scalar=16, sliding_window=4, attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0, tie_word_embeddings=True,
        )),
        # Gemma 3 text: per-head q/k norm, 5 local layers (window 4, RoPE base 10000) then 1 global layer
        # (base 1e6, linear scaling 8): llama.cpp's fixed pattern, so 6 layers
        "gemma3": (t.Gemma3TextConfig, dict(
            hidden_size=32, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            num_hidden_layers=6, query_pre_attn_scalar=16, sliding_window=4, tie_word_embeddings=True,
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        )),
        # Gemma 3 multimodal checkpoint (Gemma3ForConditionalGeneration, as gemma-3-4b-it and larger ship): the
        # text model under model.language_model.*, a tiny SigLIP tower next to it, text_config saved as a diff
        # against Gemma3TextConfig's defaults (so the reader must know them); text-only prompts
        "gemma3-mm": (t.Gemma3Config, dict(
            text_config=dict(
                hidden_size=32, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                num_hidden_layers=6, query_pre_attn_scalar=16, sliding_window=4, vocab_size=VOCAB,
                max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1, pad_token_id=None,
            ),
            vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                               image_size=28, patch_size=14),
            mm_tokens_per_image=4, image_token_index=3, boi_token_index=2, eoi_token_index=3,
        )),
        # Mixtral: 4 experts, top-2 (softmax over the chosen two), sliding window off
        "mixtral": (t.MixtralConfig, dict(
            hidden_size=32, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False, sliding_window=None,
        )),
        # Qwen3-MoE: q/k norm, 6 experts, top-2 renormalized (norm_topk_prob, as the released models and llama.cpp)
        "qwen3moe": (t.Qwen3MoeConfig, dict(
            hidden_size=32, intermediate_size=64, moe_intermediate_size=32, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, num_experts=6, num_experts_per_tok=2, norm_topk_prob=True,
            decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False,
        )),
        # gpt-oss: attention sinks, sliding (window 4) / full layers, q/k/v/o biases, 4 experts top-2 with
        # router and expert biases and the clamped SwiGLU, YaRN RoPE (factor 8 over 16 original positions)
        "gpt-oss": (t.GptOssConfig, dict(
            hidden_size=32, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            num_local_experts=4, num_experts_per_tok=2, sliding_window=4, tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 8.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "original_max_position_embeddings": 16, "truncate": False},
        )),
        # Qwen3-MoE as transformers' defaults make it: norm_topk_prob false (the chosen experts keep their share
        # of the full softmax) and decoder_sparse_step 2 (layer 0 a dense MLP, layer 1 experts); HF only
        # (llama.cpp's qwen3moe always renormalizes and has no dense layers)
        "qwen3moe-mixed": (t.Qwen3MoeConfig, dict(
            hidden_size=32, intermediate_size=64, moe_intermediate_size=32, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, num_experts=6, num_experts_per_tok=2, norm_topk_prob=False,
            decoder_sparse_step=2, mlp_only_layers=[], tie_word_embeddings=False,
        )),
        # SmolLM3: every 4th layer has no RoPE (4 layers: layer 3 is RoPE-less)
        "smollm3": (t.SmolLM3Config, dict(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
            tie_word_embeddings=False, num_hidden_layers=4, no_rope_layer_interval=4,
        )),
    }  # fmt: skip


def train_tokenizer() -> Tokenizer:
    """A byte-level BPE with VOCAB tokens (4 specials + 256 bytes + merges), BOS added by the post-processor."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(CORPUS * 4, trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    return tok


@torch.no_grad()
def randomize(model: torch.nn.Module, seed: int, std: float) -> None:
    """Every parameter from a seeded normal: matrices N(0, std), biases N(0, 0.1), norm weights 1 + N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
        if name.endswith("bias"):
            p.copy_(0.1 * noise)
        elif p.dim() == 1 and name.endswith("sinks"):  # gpt-oss attention sinks
            p.copy_(noise)
        elif p.dim() == 1:  # RMSNorm weights (Gemma's scale by 1 + w: theirs end up near 2)
            p.copy_(1.0 + 0.1 * noise)
        else:
            p.copy_(std * noise)


@torch.no_grad()
def reference(model: torch.nn.Module, ids: list[int]) -> tuple[np.ndarray, list[int], list[float]] | None:
    """(prompt logits, greedy ids, top-2 margins) or None when this seed is not a stable reference."""
    x = torch.tensor([ids])
    logits = model(x).logits[0].float().numpy()  # (T, V)
    out = model.generate(
        x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=NUM_NEW, min_new_tokens=0,
        eos_token_id=COMMON["eos_token_id"], pad_token_id=COMMON["eos_token_id"], output_logits=True,
        return_dict_in_generate=True,
    )  # fmt: skip
    new = out.sequences[0, len(ids) :].tolist()
    if len(new) != NUM_NEW or COMMON["eos_token_id"] in new:
        return None
    margins = []
    for step in out.logits:
        top2 = torch.topk(step[0].float(), 2).values
        margins.append(float(top2[0] - top2[1]))
    # the same continuation without the KV cache: full recompute, argmax of the last row
    seq = list(ids)
    for _ in range(NUM_NEW):
        seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    if seq[len(ids) :] != new or min(margins) <= MARGIN:
        return None
    return logits, new, margins


def build(name: str, cls: type, kw: dict, tok: Tokenizer, ids: list[int], out: pathlib.Path, std: float) -> None:
    cfg = cls(**kw) if "text_config" in kw else cls(**{**COMMON, **kw})
    cfg._attn_implementation = "eager"
    for seed in range(MAX_SEEDS):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        randomize(model, seed, std)
        ref = reference(model, ids)
        if ref is not None:
            break
    else:
        raise SystemExit(f"{name}: no seed below {MAX_SEEDS} gives a stable greedy reference")
    logits, new, margins = ref
    d = out / name
    if d.exists():
        shutil.rmtree(d)
    hf, rd = d / "hf", d / "ref"
    model.save_pretrained(hf, safe_serialization=True)
    tok.save(str(hf / "tokenizer.json"))
    (hf / "tokenizer_config.json").write_text(
        json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
             "add_bos_token": True, "model_max_length": 512},
            indent=2,
        ) + "\n"
    )  # fmt: skip
    rd.mkdir(parents=True)
    np.save(rd / "prompt_ids.npy", np.asarray(ids, np.int32))
    np.save(rd / "logits_hf_fp32.npy", logits.astype(np.float32))
    np.save(rd / "greedy_ids.npy", np.asarray(new, np.int32))
    info = {
        "variant": name,
        "architecture": type(model).__name__,
        "seed": seed,
        "init_std": std,
        "prompt": PROMPT,
        "prompt_ids": ids,
        "greedy_ids": new,
        "greedy_top2_margins": margins,
        "max_abs_logit": float(np.abs(logits).max()),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
        "attn_implementation": "eager",
    }  # fmt: skip
    (rd / "ref.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"{name}: seed {seed}, min margin {min(margins):.4f}, max |logit| {info['max_abs_logit']:.2f}, {new}")


# Runs llama.cpp's convert_hf_to_gguf.py on a fixture. Our tiny BPE's pre-tokenizer hash is unknown to
# llama.cpp, so it is declared "gpt-2" (ByteLevel, as trained above); Gemma's converters want a
# sentencepiece model (Phi-3's too) and get the BPE vocab instead. Nothing else of the converter is changed.
_CONVERT = """
import sys
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + "/gguf-py")
import convert_hf_to_gguf as c
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
base.TextModel._set_vocab_sentencepiece = base.TextModel._set_vocab_gpt2
from conversion import phi
phi.Phi3MiniModel.set_vocab = base.TextModel._set_vocab_gpt2
sys.argv = ["convert_hf_to_gguf.py", sys.argv[2], "--outfile", sys.argv[3], "--outtype", sys.argv[4]]
c.main()
"""


# variants that also get a Q8_0 GGUF (the converter's own quantizer): expert tensors stay quantized
Q8_0_GGUF = ("mixtral",)


def convert_gguf(converter: pathlib.Path, d: pathlib.Path) -> None:
    """NAME/gguf/model-f32.gguf (and -q8_0) from NAME/hf with llama.cpp's converter (a llama.cpp checkout)."""
    import subprocess
    import sys

    for outtype in ("f32", "q8_0") if d.name in Q8_0_GGUF else ("f32",):
        out = d / "gguf" / f"model-{outtype}.gguf"
        out.parent.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-c", _CONVERT, str(converter), str(d / "hf"), str(out), outtype], check=True)
        print(f"{d.name}: {out} ({out.stat().st_size} bytes)")


# variants that also get gguf/model-mxfp4-experts.gguf: the F32 file with its *_exps weights in MXFP4
MXFP4_EXPERTS = ("gpt-oss",)


def mxfp4_experts(src: pathlib.Path, dst: pathlib.Path) -> None:
    """Copy a GGUF with every 3-D expert weight quantized to MXFP4 by gguf-py (as gpt-oss GGUFs ship)."""
    import gguf
    from gguf import quants

    reader = gguf.GGUFReader(src)
    arch = str(reader.fields["general.architecture"].contents())
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        data = np.asarray(t.data)
        if t.name.endswith("_exps.weight"):
            q = quants.quantize(np.ascontiguousarray(data, np.float32), gguf.GGMLQuantizationType.MXFP4)
            writer.add_tensor(t.name, q, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
        else:
            writer.add_tensor(t.name, np.ascontiguousarray(data), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{src.parent.parent.name}: {dst} ({dst.stat().st_size} bytes)")


# variants that also get references past the original context (long-RoPE's long factors): ref/long.npz
LONG_PROMPT = ("phi3-longrope",)


@torch.no_grad()
def long_refs(d: pathlib.Path, tok: Tokenizer) -> None:
    """ref/long.npz for a long-RoPE variant (original context 64): transformers' logits of an 80-token prompt
    (every position rotated with the long factors, as transformers does once a forward passes the original
    context) and a 12-token greedy continuation of a 58-token prompt that crosses position 64 while
    decoding with the KV cache (prompt keys stay short-rotated, later tokens long)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(d / "hf", dtype=torch.float32).eval()
    ids = tok.encode(" ".join(CORPUS)).ids
    long_ids, cross_ids = ids[:80], ids[:58]
    assert len(long_ids) == 80
    logits = model(torch.tensor([long_ids])).logits[0].float().numpy()
    x = torch.tensor([cross_ids])
    out = model.generate(
        x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=12, min_new_tokens=12,
        pad_token_id=COMMON["eos_token_id"], output_logits=True, return_dict_in_generate=True,
    )  # fmt: skip
    margins = [float(torch.topk(step[0].float(), 2).values.diff().abs()) for step in out.logits]
    np.savez(
        d / "ref" / "long.npz", long_ids=np.asarray(long_ids, np.int32), long_logits=logits.astype(np.float32),
        cross_ids=np.asarray(cross_ids, np.int32), cross_greedy=out.sequences[0, 58:].numpy().astype(np.int32),
        cross_margins=np.asarray(margins, np.float32),
    )  # fmt: skip
    print(f"{d.name}: long refs, min greedy margin {min(margins):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("tests/fixtures/models/variants"))
    ap.add_argument("--std", type=float, default=0.2)
    ap.add_argument("--only", nargs="*", help="variant names (default: all)")
    ap.add_argument("--gguf", type=pathlib.Path, help="llama.cpp checkout: also write NAME/gguf/model-f32.gguf")
    ap.add_argument("--gguf-only", action="store_true", help="convert the existing HF folders, build nothing")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = train_tokenizer()
    ids = tok.encode(PROMPT).ids
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (cls, kw) in variants().items():
        if not args.only or name in args.only:
            if not args.gguf_only:
                build(name, cls, kw, tok, ids, args.out, args.std)
            if name in LONG_PROMPT and not args.gguf_only:
                long_refs(args.out / name, tok)
            if args.gguf:
                convert_gguf(args.gguf, args.out / name)
                if name in MXFP4_EXPERTS:
                    g = args.out / name / "gguf"
                    mxfp4_experts(g / "model-f32.gguf", g / "model-mxfp4-experts.gguf")


if __name__ == "__main__":
    main()
