"""Write tests/fixtures/models/quant/: llama.cpp-quantized GGUFs of tiny random models with llama.cpp's logits.

Dev-only (torch + transformers here, llama-cpp-python in a second venv; modelc imports neither):

    /work/refvenv/bin/python tools/make_quant_fixtures.py --llama-cpp LLAMA_CPP \\
        --llamacpp-python /path/to/venv-with-llama_cpp/bin/python [--out tests/fixtures/models/quant]

LLAMA_CPP is a llama.cpp checkout (or llama-cpp-python's sdist vendor/llama.cpp) for its
convert_hf_to_gguf.py and, for IMATRIX_FTYPES, its built tools (LLAMA_CPP/build/bin/llama-imatrix,
llama-quantize). For each family of configs() (`llama`: dense, GQA; `qwen3moe`: q/k norm, 4 experts
top-2; `gpt-oss`, `llama3`, `gemma2`, `gemma3`) it builds a random model of hidden 256 (so K- and
IQ-quants apply to every matrix), converts it to an F32 GGUF with llama.cpp's converter, quantizes that
with llama.cpp's own quantizer (llama_model_quantize, no importance matrix) to every file type of FTYPES it
accepts, and for IMATRIX_FAMILIES to IMATRIX_FTYPES with an importance matrix (llama-imatrix on
IMATRIX_SENTENCES, then llama-quantize --imatrix), and evaluates every file with llama.cpp (logits at
every prompt position, one batch, F32 KV cache). It writes FAMILY/model-TYPE.gguf (KEPT's types, every
one with --all-types) and FAMILY/ref/: prompt_ids.npy, logits_fp32.npy (transformers, float32),
logits_llamacpp.npz (the kept types, float16) and ref.json (llama.cpp's error for every type made, the
types of every tensor, versions). The F32 GGUF itself is not kept (the HF logits are the fp32 reference).
tests/models/test_quant_vs_llamacpp.py checks modelc against these with the issues' rules.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

# the repo root instead of tools/ on sys.path, for `tools.make_variant_fixtures`
sys.path[0] = str(pathlib.Path(__file__).resolve().parents[1])

# llama.cpp file types (llama_ftype) made without an importance matrix; the K mixes as users download them
FTYPES = {
    "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q4_K_S": 14,
    "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ3_S": 26, "IQ4_XS": 30, "TQ1_0": 36,
    "TQ2_0": 37, "MXFP4_MOE": 38, "Q1_0": 40, "Q2_0": 41,
}  # fmt: skip
# file types llama.cpp's quantizer makes only with an importance matrix: llama-imatrix (on IMATRIX_TEXT, through
# the F32 file) then llama-quantize --imatrix, both from LLAMA_CPP/build/bin
IMATRIX_FTYPES = {"IQ2_XXS": 19, "IQ2_XS": 20, "IQ3_XXS": 23, "IQ1_S": 24, "IQ2_S": 28, "IQ1_M": 31}
MOE_ONLY = ("MXFP4_MOE",)
# files kept in tests/fixtures per family (--all-types keeps every one; each MoE file is ~0.6 MB): the llama
# family covers each type's kernels, the others the types where an engine difference showed (issue 41)
# fmt: off
KEPT = {
    "llama": (
        "Q4_0", "Q4_1", "Q8_0", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ3_S",
        "IQ4_XS", "TQ1_0", "TQ2_0", "Q1_0", "Q2_0", *IMATRIX_FTYPES,
    ),
    "qwen3moe": ("Q4_0", "Q4_K_M", "IQ4_XS", "MXFP4_MOE"),
    "gpt-oss": ("Q8_0", "Q3_K_S"),
    "llama3": ("IQ4_NL",),
    "gemma2": ("Q4_K_M",),
    "gemma3": ("Q4_K_M",),
}
# fmt: on
IMATRIX_FAMILIES = ("llama",)
PROMPT = (
    "The farmer packed bread and cheese for the hill, and the baker lights the oven every morning "
    "while the river was small in the beginning."
)
NUM_POS = 32
HIDDEN = 256


def configs():
    import transformers as t

    common = dict(
        vocab_size=320, hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=1,
        head_dim=64, max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1,
        pad_token_id=None, tie_word_embeddings=True,
    )  # fmt: skip
    two = {**common, "num_hidden_layers": 2}
    return {
        "llama": t.LlamaConfig(**common, intermediate_size=256),
        "qwen3moe": t.Qwen3MoeConfig(
            **common, intermediate_size=256, moe_intermediate_size=256, num_experts=4, num_experts_per_tok=2,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        ),
        # gpt-oss: sinks, one sliding layer (window 8), q/k/v/o biases, 4 experts top-2 with router and expert
        # biases and the clamped SwiGLU, YaRN (factor 8 over 16 original positions, truncate false), untied head
        "gpt-oss": t.GptOssConfig(
            **{**common, "tie_word_embeddings": False}, intermediate_size=256, num_local_experts=4,
            num_experts_per_tok=2, sliding_window=8,
            rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 8.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "original_max_position_embeddings": 16, "truncate": False},
        ),
        # Llama 3: llama3 rope scaling (original context 16, so all three bands occur), GQA 4:1, 2 layers
        "llama3": t.LlamaConfig(
            **two, intermediate_size=256, rope_parameters={
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        ),
        # Gemma 2: sandwich (1 + w) norms, sqrt(hidden) embedding scale, GeGLU, soft-capping (attention 50,
        # final 30 as released), layer 0 slides over 8 positions
        "gemma2": t.Gemma2Config(
            **two, intermediate_size=256, query_pre_attn_scalar=64, sliding_window=8, attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh",
        ),
        # Gemma 3 text: q/k norm, 5 local layers (window 8) then a global one (llama.cpp's fixed pattern)
        "gemma3": t.Gemma3TextConfig(
            **{**common, "num_hidden_layers": 6}, intermediate_size=256, query_pre_attn_scalar=64,
            sliding_window=8, rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        ),
    }  # fmt: skip


# runs in the llama-cpp-python venv: quantize the F32 file to each type, then llama.cpp's logits of every file
_LLAMACPP = r"""
import ctypes, json, os, sys
import numpy as np
import llama_cpp
from llama_cpp import Llama
req = json.loads(sys.stdin.read())
out = {}
for name, ftype in req["ftypes"].items():
    dst = os.path.join(req["dir"], f"model-{name}.gguf")
    if name != "F32" and name not in req["made"]:
        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype = ftype
        p.nthread = 1
        rc = llama_cpp.llama_model_quantize(req["f32"].encode(), dst.encode(), ctypes.byref(p))
        if rc != 0:
            out[name] = {"error": f"llama_model_quantize returned {rc}"}
            continue
    llm = Llama(dst if name != "F32" else req["f32"], n_ctx=64, n_batch=64, n_ubatch=64, logits_all=True,
                n_threads=2, type_k=0, type_v=0, verbose=False)
    llm.eval(req["ids"])
    np.save(os.path.join(req["dir"], f"logits-{name}.npy"), np.asarray(llm.scores[:len(req["ids"])], np.float32))
    out[name] = {"ok": True}
    del llm
print(json.dumps({"version": llama_cpp.__version__, "files": out}))
"""


def randomize(model, seed: int) -> None:
    """Matrices N(0, 0.05), norm weights 1 + N(0, 0.1), biases N(0, 0.1), gpt-oss's sinks N(0, 1): logits of a few
    units, stable argmax margins."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif name.endswith("sinks"):
                p.copy_(noise)
            else:
                p.copy_(1.0 + 0.1 * noise if p.dim() == 1 else 0.05 * noise)


# llama-imatrix's text: other sentences than the prompt's, seeded shuffles (~40 chunks of 64 tokens)
IMATRIX_SENTENCES = [
    "A lighthouse keeper counts the ships that pass the rocks on a stormy night.",
    "Seven students solved 14 puzzles in 23 minutes, then argued about the last one.",
    "The orchestra tuned their violins while the conductor studied the score.",
    "Gardeners plant tulips in autumn so that the bulbs bloom early in spring.",
    "Trains leave the station at 6:45, 7:15 and 8:05 on weekdays, less often on Sundays.",
    "Programs read input, transform the data and write the results to a file.",
    "Snow covered the mountain pass, and the travellers waited in the village inn.",
    "He repaired the old clock, oiled its gears and set it to the correct time.",
]


def make_imatrix(bin_dir: pathlib.Path, f32: pathlib.Path, tmp: pathlib.Path) -> pathlib.Path:
    import random

    rng = random.Random(0)
    lines = []
    for _ in range(60):
        rng.shuffle(IMATRIX_SENTENCES)
        lines.append(" ".join(IMATRIX_SENTENCES))
    text, imat = tmp / "imatrix.txt", tmp / "imatrix.gguf"
    text.write_text("\n".join(lines) + "\n")
    subprocess.run([str(bin_dir / "llama-imatrix"), "-m", str(f32), "-f", str(text), "-o", str(imat), "-c", "64",
                    "-b", "64", "-t", "1", "--no-ppl"], check=True, capture_output=True)  # fmt: skip
    return imat


def quantize_with_imatrix(bin_dir: pathlib.Path, f32: pathlib.Path, imat: pathlib.Path, out: pathlib.Path) -> dict:
    """IMATRIX_FTYPES through llama-quantize --imatrix; {name: error} for the ones it refuses."""
    errors = {}
    for name in IMATRIX_FTYPES:
        res = subprocess.run([str(bin_dir / "llama-quantize"), "--imatrix", str(imat), str(f32),
                              str(out / f"model-{name}.gguf"), name, "1"], capture_output=True, text=True)  # fmt: skip
        if res.returncode != 0:
            errors[name] = f"llama-quantize returned {res.returncode}: {res.stderr.strip().splitlines()[-1:]}"
    return errors


def tensor_types(path: pathlib.Path) -> dict[str, str]:
    import gguf

    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def iq4nl_rows(f32: pathlib.Path, iq4nl: pathlib.Path, out: pathlib.Path, rows: int = 96) -> None:
    """ref/iq4nl_rows.npz: the first rows of blk.0.ffn_down.weight in F32 and as llama.cpp quantized them to
    IQ4_NL (for modelc's pack-time IQ4_NL quantizer, checked bit for bit)."""
    import gguf

    name = "blk.0.ffn_down.weight"
    x = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(f32).tensors}[name][:rows]
    q = {t.name: t for t in gguf.GGUFReader(iq4nl).tensors}[name]
    assert q.tensor_type.name == "IQ4_NL", q.tensor_type
    np.savez(out, f32=np.ascontiguousarray(x, np.float32), iq4_nl=np.asarray(q.data)[:rows])


def errors(got: np.ndarray, want: np.ndarray) -> dict:
    return {
        "mean_abs_err": float(np.abs(got.astype(np.float64) - want).mean()),
        "argmax_agree": int((got.argmax(1) == want.argmax(1)).sum()),
    }


def rounded_yarn_logits(cfg, ids: list[int]) -> np.ndarray:
    """transformers' fp32 logits of the same random gpt-oss with `truncate: true` (the YaRN ramp's ends rounded to
    whole dims: transformers' default when config.json has no `truncate`, and what llama.cpp and modelc do
    with every gpt-oss GGUF, which cannot carry the flag)."""
    import copy

    import torch
    import transformers

    cfg = copy.deepcopy(cfg)
    cfg.rope_parameters = {**cfg.rope_parameters, "truncate": True}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    randomize(model, 0)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def build(family: str, cfg, a, ids: list[int]) -> None:
    import torch
    import transformers

    from tools.make_variant_fixtures import _CONVERT, train_tokenizer

    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    randomize(model, 0)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].float().numpy()
    out = a.out / family
    ref = out / "ref"
    ref.mkdir(parents=True, exist_ok=True)
    if family == "gpt-oss":
        np.save(ref / "logits_fp32_rounded_yarn.npy", rounded_yarn_logits(cfg, ids))
    for old in out.glob("model-*.gguf"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        hf, f32 = pathlib.Path(tmp) / "hf", pathlib.Path(tmp) / "model-F32.gguf"
        model.save_pretrained(hf, safe_serialization=True)
        train_tokenizer().save(str(hf / "tokenizer.json"))
        tok_cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}
        (hf / "tokenizer_config.json").write_text(json.dumps(tok_cfg) + "\n")
        subprocess.run([sys.executable, "-c", _CONVERT, str(a.llama_cpp), str(hf), str(f32), "f32"], check=True)
        moe = family in ("qwen3moe", "gpt-oss")
        ftypes = {"F32": 0, **{k: v for k, v in FTYPES.items() if moe or k not in MOE_ONLY}}
        made, refused = [], {}
        if family in IMATRIX_FAMILIES:
            bin_dir = a.llama_cpp / "build" / "bin"
            refused = quantize_with_imatrix(bin_dir, f32, make_imatrix(bin_dir, f32, pathlib.Path(tmp)), out)
            made = [n for n in IMATRIX_FTYPES if n not in refused]
            ftypes.update({n: IMATRIX_FTYPES[n] for n in made})
        req = {"f32": str(f32), "dir": str(out), "ids": ids, "ftypes": ftypes, "made": made}
        res = subprocess.run([a.llamacpp_python, "-c", _LLAMACPP], input=json.dumps(req), capture_output=True,
                             text=True, check=True)  # fmt: skip
        res = json.loads(res.stdout.strip().splitlines()[-1])
        if family == "llama":
            iq4nl_rows(f32, out / "model-IQ4_NL.gguf", ref / "iq4nl_rows.npz")
        f32_logits = np.load(out / "logits-F32.npy")
        (out / "logits-F32.npy").unlink()
        info = {
            "family": family, "prompt_ids": ids, "config": cfg.to_diff_dict(), "llama_cpp_python": res["version"],
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "llamacpp_f32_vs_transformers_max_rel": float(np.abs(f32_logits - want).max() / np.abs(want).max()),
            "types": {n: {"error": e} for n, e in refused.items()},
        }  # fmt: skip
        if made:
            info["imatrix"] = {"sentences": IMATRIX_SENTENCES, "tool": "llama-imatrix -c 64 -b 64 --no-ppl"}
        lcpp = {}
        for name in [*FTYPES, *IMATRIX_FTYPES]:
            if name not in ftypes:
                continue
            if "error" in res["files"][name]:
                info["types"][name] = {"error": res["files"][name]["error"]}
                continue
            got = np.load(out / f"logits-{name}.npy")
            (out / f"logits-{name}.npy").unlink()
            lcpp[name] = got.astype(np.float16)
            path = out / f"model-{name}.gguf"
            info["types"][name] = {"llamacpp": errors(got, want), "bytes": path.stat().st_size,
                                   "tensor_types": tensor_types(path)}  # fmt: skip
            print(f"{family} {name}: {info['types'][name]['llamacpp']} {path.stat().st_size} bytes")
            if not a.all_types and name not in KEPT[family]:
                path.unlink()
    info["kept"] = sorted(p.stem.removeprefix("model-") for p in out.glob("model-*.gguf"))
    np.save(ref / "prompt_ids.npy", np.asarray(ids, np.int32))
    np.save(ref / "logits_fp32.npy", want.astype(np.float32))
    lcpp = {k: v for k, v in lcpp.items() if k in info["kept"]}
    np.savez_compressed(ref / "logits_llamacpp.npz", **lcpp)
    (ref / "ref.json").write_text(json.dumps(info, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=pathlib.Path, required=True)
    ap.add_argument("--llamacpp-python", required=True)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("tests/fixtures/models/quant"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--all-types", action="store_true", help="keep every file, not only KEPT's")
    a = ap.parse_args()
    sys.path.insert(1, str(a.llama_cpp / "gguf-py"))  # its gguf-py knows the newest types (Q1_0, Q2_0)
    import torch

    from tools.make_variant_fixtures import train_tokenizer

    torch.set_num_threads(1)
    ids = train_tokenizer().encode(PROMPT).ids[:NUM_POS]
    assert len(ids) == NUM_POS, len(ids)
    for family, cfg in configs().items():
        if not a.only or family in a.only:
            build(family, cfg, a, ids)


if __name__ == "__main__":
    main()
