"""A Qwen3-MoE-shaped random model as GGUF (llama.cpp's converter, Q8_0 or F16), for benchmarks/moe_decode.py.

    /work/refvenv/bin/python benchmarks/make_moe_model.py --llama-cpp /path/to/llama.cpp --out /tmp/moe \
        [--layers 8 --hidden 1024 --experts 32 --active 4 --expert-ffn 512 --outtype q8_0]

Random weights (transformers' init), the tiny 320-token BPE of tools/make_variant_fixtures.py.
Dev-only (torch + transformers); the converter runs as in tools/make_variant_fixtures.py.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

# the repo root instead of benchmarks/ (its kernels.py would shadow the `kernels` package transformers probes)
sys.path[0] = str(pathlib.Path(__file__).resolve().parents[1])


def main() -> None:
    import torch
    import transformers

    from tools.make_variant_fixtures import _CONVERT, train_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=pathlib.Path, required=True)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/moe"))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--active", type=int, default=4)
    ap.add_argument("--expert-ffn", type=int, default=512)
    ap.add_argument("--outtype", default="q8_0")
    a = ap.parse_args()
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=320, hidden_size=a.hidden, intermediate_size=4 * a.hidden, moe_intermediate_size=a.expert_ffn,
        num_hidden_layers=a.layers, num_attention_heads=a.hidden // 64, num_key_value_heads=max(1, a.hidden // 256),
        head_dim=64, num_experts=a.experts, num_experts_per_tok=a.active, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=4096, bos_token_id=0, eos_token_id=1,
        tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    hf = a.out / "hf"
    model.save_pretrained(hf, safe_serialization=True)
    train_tokenizer().save(str(hf / "tokenizer.json"))
    tok_cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}
    (hf / "tokenizer_config.json").write_text(json.dumps(tok_cfg) + "\n")
    gguf = a.out / f"qwen3moe-{a.layers}x{a.experts}e{a.active}-{a.outtype}.gguf"
    subprocess.run([sys.executable, "-c", _CONVERT, str(a.llama_cpp), str(hf), str(gguf), a.outtype], check=True)
    print(gguf)


if __name__ == "__main__":
    main()
