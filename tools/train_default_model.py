"""Train modelc's bundled default model: a tiny LLaMA-shaped Python code model with FIM and chat.

Dev-only tool (needs torch, tokenizers, jinja2; modelc itself never imports torch). Trains on the
CPython standard library's own sources (PSF licence, redistributable; tools/default_model_data.py),
seeded and resumable: OUT/ckpt.pt (model, optimizer, step, data RNG) is rewritten every
--eval-every steps and on SIGTERM/SIGINT, and a rerun of the same command continues from it. The
best held-out checkpoint so far is exported as a Hugging Face folder, OUT/best, ready for
`modelc pack`. The budget is in optimizer steps (--steps), never wall-clock, so pauses
(SIGSTOP/SIGCONT) cost nothing. Learning rate: linear warmup, constant, then a cosine decay over the
last --decay-frac of the steps (warmup-stable-decay); OUT/stable.pt keeps the weights from the
start of the decay, so a later session can continue the constant phase with a larger --steps.

    nice -n 19 python tools/train_default_model.py --init-from /work/dm-train/base --out /work/dm-train/run --steps 3000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from default_model_data import (  # noqa: E402
    CHAT_TEMPLATE,
    EOS,
    IM_END,
    NEW_SPECIALS,
    Batches,
    read_texts,
    split_files,
)
from default_model_net import TinyLlama, config_json, load_hf_weights, save_hf_folder  # noqa: E402

SHAPE = {
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


def lr_at(step: int, args) -> float:
    warm = min(1.0, (step + 1) / args.warmup)
    decay_start = int(args.steps * (1 - args.decay_frac))
    if step < decay_start:
        return args.lr * warm
    frac = min(1.0, (step - decay_start) / max(1, args.steps - decay_start))
    return args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def token_bytes(tok: Tokenizer) -> np.ndarray:
    """UTF-8 bytes each token stands for (byte-level BPE: one character per byte); 0 for special tokens."""
    out = np.zeros(tok.get_vocab_size(), dtype=np.int64)
    specials = {t.content for t in tok.get_added_tokens_decoder().values()}
    for text, i in tok.get_vocab().items():
        out[i] = 0 if text in specials else len(text)
    return out


@torch.no_grad()
def evaluate(model, held_ids: np.ndarray, nbytes: np.ndarray, extra_rows: dict[str, np.ndarray], windows=200) -> dict:
    """The first model's protocol: the first 200 windows of 128 tokens of the held-out stream (per-token
    perplexity and bits per byte), plus mean loss over held-out FIM and chat rows."""
    model.eval()
    nats, tokens, byts = 0.0, 0, 0
    for i in range(min(windows, (len(held_ids) - 1) // 128)):
        chunk = torch.from_numpy(held_ids[i * 128 : i * 128 + 129])[None]
        logits = model(chunk[:, :-1]).float()
        nats += F.cross_entropy(logits[0], chunk[0, 1:], reduction="sum").item()
        tokens += 128
        byts += int(nbytes[chunk[0, 1:].numpy()].sum())
    out = {"ppl": math.exp(nats / tokens), "bpb": nats / math.log(2) / byts, "eval_tokens": tokens, "bytes": byts}
    for name, rows in extra_rows.items():
        x = torch.from_numpy(rows)
        logits = model(x[:, :-1]).float()
        out[name + "_loss"] = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)).item()
    model.train()
    return out


def export(model, tok, cfg, folder: pathlib.Path, metrics: dict) -> None:
    """A complete HF folder, written beside and renamed into place."""
    eos_id, im_end = tok.token_to_id(EOS), tok.token_to_id(IM_END)
    tmp = folder.with_name(folder.name + ".tmp")
    tok_cfg = {
        "bos_token": EOS,
        "eos_token": EOS,
        "add_bos_token": False,
        "model_max_length": 1024,
        "chat_template": CHAT_TEMPLATE,
    }
    save_hf_folder(
        model,
        tok,
        tmp,
        {
            "config.json": config_json(cfg, eos_id),
            "tokenizer_config.json": json.dumps(tok_cfg, indent=2),
            "generation_config.json": json.dumps({"bos_token_id": eos_id, "eos_token_id": [eos_id, im_end]}),
            "metrics.json": json.dumps(metrics, indent=2),
        },
    )
    if folder.exists():
        old = folder.with_name(folder.name + ".old")
        folder.rename(old)
        tmp.rename(folder)
        for p in old.iterdir():
            p.unlink()
        old.rmdir()
    else:
        tmp.rename(folder)


def save_ckpt(path: pathlib.Path, state: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def setup(args, out: pathlib.Path):
    """(tokenizer, config, model, checkpoint state or None) for a fresh or resumed run."""
    ckpt = out / "ckpt.pt"
    if ckpt.exists():
        tok = Tokenizer.from_file(str(out / "tokenizer.json"))
        cfg = json.loads((out / "shape.json").read_text())
        model = TinyLlama(cfg)
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        print(f"resumed from {ckpt} at step {state['step']}", flush=True)
        return tok, cfg, model, state
    src = pathlib.Path(args.init_from)
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    old_vocab = tok.get_vocab_size()
    tok.add_special_tokens([t for t in NEW_SPECIALS if tok.token_to_id(t) is None])
    cfg = {"vocab_size": tok.get_vocab_size(), **SHAPE}
    model = TinyLlama(cfg)
    weights = load_hf_weights(src)
    emb = weights["embed_tokens.weight"]
    new_rows = emb.mean(0, keepdim=True) + 0.02 * torch.randn(cfg["vocab_size"] - old_vocab, emb.shape[1])
    weights["embed_tokens.weight"] = torch.cat([emb, new_rows])
    model.load_state_dict(weights)
    tok.save(str(out / "tokenizer.json"))
    (out / "shape.json").write_text(json.dumps(cfg, indent=2))
    print(f"initialised from {src}: vocabulary {old_vocab} -> {cfg['vocab_size']}", flush=True)
    return tok, cfg, model, None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/work/dm-train/run")
    ap.add_argument("--init-from", default="/work/dm-train/base", help="HF folder to start from (fresh runs)")
    ap.add_argument("--steps", type=int, default=3000, help="schedule length in optimizer steps")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--decay-frac", type=float, default=0.2)
    ap.add_argument("--fim-rate", type=float, default=0.3)
    ap.add_argument("--chat-rate", type=float, default=0.15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bf16", type=int, default=1, help="bf16 autocast for the forward pass (1.5x on AVX-512 BF16)")
    ap.add_argument("--eval-every", type=int, default=150)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--pid-file", default="/work/dm-train/train.pid")
    ap.add_argument("--eval", default=None, help="only evaluate this HF folder (e.g. the unpacked first model)")
    ap.add_argument("--eval-windows", type=int, default=200, help="with --eval: 128-token held-out windows")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok, cfg, model, state = setup(args, out)

    streams = {}
    for part, files in zip(("train", "held"), split_files(), strict=True):
        cache = out / f"data-{part}.npz"
        if not cache.exists():
            np.savez(cache.with_suffix(".tmp.npz"), **Batches.arrays(tok, read_texts(files)))
            os.replace(cache.with_suffix(".tmp.npz"), cache)
        streams[part] = dict(np.load(cache))
    data = Batches(tok, streams["train"], args.seq, args.fim_rate, args.chat_rate)
    held = Batches(tok, streams["held"], args.seq, 1.0, 0.0)
    erng = np.random.default_rng(7)
    extra = {"fim": held.batch(erng, 48)}
    held.chat_rate = 1.0
    extra["chat"] = held.batch(erng, 48)
    nbytes = token_bytes(tok)
    print(
        f"training: {len(data.code):,} tokens, {data.n_chat} chat pairs; held out: {len(held.code):,} tokens; "
        f"{sum(p.numel() for p in model.parameters()):,} parameters",
        flush=True,
    )
    if args.eval:
        weights = load_hf_weights(pathlib.Path(args.eval))
        emb = weights["embed_tokens.weight"]  # the first model lacks the 5 new tokens: their rows are its mean row
        pad = emb.mean(0, keepdim=True).expand(cfg["vocab_size"] - emb.shape[0], -1)
        weights["embed_tokens.weight"] = torch.cat([emb, pad])
        model.load_state_dict(weights)
        print(json.dumps({"eval": args.eval, **evaluate(model, held.code, nbytes, extra, args.eval_windows)}))
        return
    pathlib.Path(args.pid_file).write_text(f"{os.getpid()}\n")

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05, betas=(0.9, 0.95))
    rng = np.random.default_rng(args.seed)
    step, best, seen = 0, None, 0
    if state is not None:
        opt.load_state_dict(state["opt"])
        rng.bit_generator.state = state["rng"]
        step, best, seen = state["step"], state["best"], state["tokens"]
    log = (out / "log.jsonl").open("a")

    def checkpoint(name: str = "ckpt.pt") -> None:
        save_ckpt(
            out / name,
            {
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "step": step,
                "best": best,
                "rng": rng.bit_generator.state,
                "tokens": seen,
                "args": vars(args),
            },
        )

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    if state is None:
        m = evaluate(model, held.code, nbytes, extra)
        print(f"step 0 (initial weights) {m}", flush=True)
        log.write(json.dumps({"step": 0, "tokens": 0, **m}) + "\n")
    decay_start = int(args.steps * (1 - args.decay_frac))
    c0, w0, t0 = time.process_time(), time.monotonic(), seen
    model.train()
    while step < args.steps and not stop:
        if step == decay_start and not (out / "stable.pt").exists():
            checkpoint("stable.pt")
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = torch.from_numpy(data.batch(rng, args.batch))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(args.bf16)):
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += args.batch * args.seq
        if step % 25 == 0:
            cpu = time.process_time() - c0
            print(
                f"step {step} loss {loss.item():.3f} lr {lr:.2e} tokens {seen:,} "
                f"{(seen - t0) / max(cpu, 1e-9):.0f} tok/s cpu {(seen - t0) / (time.monotonic() - w0):.0f} tok/s wall",
                flush=True,
            )
        if step % args.eval_every == 0 or step == args.steps:
            m = evaluate(model, held.code, nbytes, extra)
            rec = {"step": step, "tokens": seen, "lr": lr, "cpu_s": time.process_time() - c0, **m}
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(f"eval {rec}", flush=True)
            if best is None or m["ppl"] < best:
                best = m["ppl"]
                export(model, tok, cfg, out / "best", {**rec, "command": " ".join(sys.argv)})
            checkpoint()
    checkpoint()
    print(f"saved at step {step} ({seen:,} tokens); best held-out perplexity {best}", flush=True)


if __name__ == "__main__":
    main()
