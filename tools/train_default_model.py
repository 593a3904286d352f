"""Train modelc's bundled default model: a tiny LLaMA-shaped Python code model.

Dev-only tool (needs torch, which modelc itself never imports). Trains on the
CPython standard library's own sources (PSF licence, redistributable), writes a
Hugging Face folder (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json) and, when modelc is importable, packs it into
modelc/data/default.modelc.

    python tools/train_default_model.py --minutes 20 --out /tmp/default-model

Seeded; the held-out perplexity (every 20th stdlib file) is printed and written
to OUT/metrics.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import random
import sysconfig
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from torch import nn

EOS = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}# {{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}# assistant:\n{% endif %}"
)


def stdlib_files() -> list[pathlib.Path]:
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    return [p for p in files if 200 < p.stat().st_size < 400_000]


def read_texts(files: list[pathlib.Path]) -> list[str]:
    out = []
    for p in files:
        try:
            out.append(p.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return out


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Block(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        d, h, kv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.h, self.kv, self.hd = h, kv, hd
        self.input_layernorm = RMSNorm(d, c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(d, c["rms_norm_eps"])
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(d, h * hd, bias=False)
        self.self_attn.k_proj = nn.Linear(d, kv * hd, bias=False)
        self.self_attn.v_proj = nn.Linear(d, kv * hd, bias=False)
        self.self_attn.o_proj = nn.Linear(h * hd, d, bias=False)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(d, c["intermediate_size"], bias=False)
        self.mlp.up_proj = nn.Linear(d, c["intermediate_size"], bias=False)
        self.mlp.down_proj = nn.Linear(c["intermediate_size"], d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        a = self.self_attn
        y = self.input_layernorm(x)
        q = a.q_proj(y).view(b, t, self.h, self.hd).transpose(1, 2)
        k = a.k_proj(y).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = a.v_proj(y).view(b, t, self.kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.h // self.kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.o_proj(o.transpose(1, 2).reshape(b, t, -1))
        y = self.post_attention_layernorm(x)
        m = self.mlp
        return x + m.down_proj(F.silu(m.gate_proj(y)) * m.up_proj(y))


class TinyLlama(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
        pos = torch.arange(c["max_position_embeddings"]).float()
        freqs = torch.outer(pos, inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for mod in self.modules():  # GPT-2 style init: small weights keep the tied head's logits sane
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.embed_tokens(ids)
        cos, sin = self.cos[:t], self.sin[:t]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x) @ self.embed_tokens.weight.T  # tied output head


def hf_state_dict(model: TinyLlama) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in model.state_dict().items():
        out["model." + k] = v.detach().contiguous().clone()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/modelc-default-model")
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--resume", default=None, help="continue from a folder this script wrote (same tokenizer)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--pack", default=None, help="also pack into this .modelc path (needs modelc importable)")
    args = ap.parse_args()

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    files = stdlib_files()
    held = files[::20]
    train = [f for i, f in enumerate(files) if i % 20]
    train_texts, held_texts = read_texts(train), read_texts(held)
    print(f"{len(train_texts)} training files, {len(held_texts)} held-out files")

    if args.resume:
        tok = Tokenizer.from_file(str(pathlib.Path(args.resume) / "tokenizer.json"))
    else:
        tok = train_tokenizer(train_texts, args.vocab)
    eos_id = tok.token_to_id(EOS)
    enc = lambda texts: np.concatenate(  # noqa: E731
        [np.array(e.ids + [eos_id], dtype=np.int64) for e in tok.encode_batch(texts)]
    )
    train_ids, held_ids = enc(train_texts), enc(held_texts)
    print(f"{len(train_ids):,} training tokens, {len(held_ids):,} held-out tokens")

    cfg = {
        "vocab_size": tok.get_vocab_size(),
        "hidden_size": 256,
        "intermediate_size": 704,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
    }
    model = TinyLlama(cfg)
    if args.resume:
        from safetensors.torch import load_file

        state = {
            k.removeprefix("model."): v
            for k, v in load_file(str(pathlib.Path(args.resume) / "model.safetensors")).items()
        }
        model.load_state_dict(state)
        print(f"resumed from {args.resume}")
    nparams = sum(p.numel() for p in model.parameters())
    print(f"{nparams:,} parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05, betas=(0.9, 0.95))
    deadline = time.monotonic() + args.minutes * 60
    t0, step, rng = time.monotonic(), 0, np.random.default_rng(args.seed)
    est_steps = None
    while time.monotonic() < deadline:
        starts = rng.integers(0, len(train_ids) - args.seq - 1, size=args.batch)
        batch = torch.from_numpy(np.stack([train_ids[s : s + args.seq + 1] for s in starts]))
        if est_steps is None and step == 5:
            per = (time.monotonic() - t0) / 5
            est_steps = max(10, int(args.minutes * 60 / per))
        total = est_steps or 10_000
        lr = args.lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / total))))
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} lr {lr:.2e} {time.monotonic() - t0:.0f}s", flush=True)
        step += 1

    model.eval()
    with torch.no_grad():
        n = (len(held_ids) - 1) // args.seq
        n = min(n, 200)
        losses = []
        for i in range(n):
            chunk = torch.from_numpy(held_ids[i * args.seq : i * args.seq + args.seq + 1])[None]
            logits = model(chunk[:, :-1])
            losses.append(F.cross_entropy(logits[0], chunk[0, 1:]).item())
    ppl = math.exp(sum(losses) / len(losses))
    print(f"held-out perplexity {ppl:.2f} over {n * args.seq} tokens after {step} steps")

    save_file(hf_state_dict(model), str(out / "model.safetensors"), metadata={"format": "pt"})
    tok.save(str(out / "tokenizer.json"))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "attention_bias": False,
        "torch_dtype": "float32",
        **cfg,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": EOS,
                "eos_token": EOS,
                "add_bos_token": False,
                "model_max_length": cfg["max_position_embeddings"],
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
        )
    )
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_id, "bos_token_id": eos_id}))
    metrics = {
        "held_out_perplexity": ppl,
        "held_out_tokens": n * args.seq,
        "steps": step,
        "resumed_from": args.resume,
        "params": nparams,
        "train_tokens_seen": step * args.batch * args.seq,
        "seconds": time.monotonic() - t0,
        "torch": torch.__version__,
        "command": "python tools/train_default_model.py "
        + " ".join(f"--{k} {v}" for k, v in vars(args).items() if v is not None),
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    with torch.no_grad():
        ids = tok.encode("def fibonacci(n):\n").ids
        x = torch.tensor([ids])
        for _ in range(40):
            nxt = model(x)[0, -1].argmax().item()
            x = torch.cat([x, torch.tensor([[nxt]])], dim=1)
        print("sample:\n" + tok.decode(x[0].tolist()))
    if args.pack:
        os.system(f"modelc pack {out} --name default --quantize f16 -o {args.pack}")


if __name__ == "__main__":
    main()
