"""The bundled default model's network in torch: LLaMA-shaped (RMSNorm, RoPE, GQA, SwiGLU, tied head),
with Hugging Face names so the saved folder packs with `modelc pack`. Dev-only (torch)."""

from __future__ import annotations

import json
import pathlib

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn


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


def load_hf_weights(folder: pathlib.Path) -> dict[str, torch.Tensor]:
    return {k.removeprefix("model."): v.float() for k, v in load_file(str(folder / "model.safetensors")).items()}


def save_hf_folder(model: TinyLlama, tok, out: pathlib.Path, extra: dict[str, str]) -> None:
    """config.json, model.safetensors, tokenizer.json and the `extra` files (name -> text) into out."""
    out.mkdir(parents=True, exist_ok=True)
    save_file(hf_state_dict(model), str(out / "model.safetensors"), metadata={"format": "pt"})
    tok.save(str(out / "tokenizer.json"))
    for name, text in extra.items():
        (out / name).write_text(text)


def config_json(cfg: dict, eos_id: int) -> str:
    return json.dumps(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "bos_token_id": eos_id,
            "eos_token_id": eos_id,
            "hidden_act": "silu",
            "tie_word_embeddings": True,
            "attention_bias": False,
            "torch_dtype": "float32",
            **cfg,
        },
        indent=2,
    )
