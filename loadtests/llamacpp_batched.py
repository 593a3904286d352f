"""llama.cpp's own batched decode through llama-cpp-python's low-level API: N sequences in one
llama_decode per step (what llama.cpp's server does with --parallel N), greedy, fixed length.

Runs in the venv that has llama-cpp-python (never modelc's), as a file, and prints one JSON line:

    /work/refvenv/bin/python loadtests/llamacpp_batched.py MODEL.gguf --levels 1,4,8,16 \
        --prompt-tokens 16 --gen-tokens 16 --threads 2

No modelc imports here. Handles the API renames of llama-cpp-python 0.2/0.3 (model/context
constructors, vocabulary size, KV clearing).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time

import llama_cpp as L
import numpy as np


def _first(*names: str):
    for n in names:
        fn = getattr(L, n, None)
        if fn is not None:
            return fn
    raise SystemExit(f"llama-cpp-python has none of {names}")


def load(path: str, threads: int, n_ctx: int, n_seq: int, extra_bufts: bool = True):
    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    mparams.use_extra_bufts = extra_bufts  # weight repacking / AMX buffers, as llama.cpp's tools default
    model = _first("llama_model_load_from_file", "llama_load_model_from_file")(path.encode(), mparams)
    if not model:
        raise SystemExit(f"llama.cpp could not load {path}")
    cparams = L.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = 512
    cparams.n_ubatch = 512
    cparams.n_seq_max = n_seq
    cparams.n_threads = threads
    cparams.n_threads_batch = threads
    ctx = _first("llama_init_from_model", "llama_new_context_with_model")(model, cparams)
    if not ctx:
        raise SystemExit("llama.cpp could not create a context")
    if hasattr(L, "llama_model_get_vocab") and hasattr(L, "llama_vocab_n_tokens"):
        n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    else:
        n_vocab = L.llama_n_vocab(model)
    return model, ctx, int(n_vocab)


def clear_kv(ctx) -> None:
    if hasattr(L, "llama_memory_clear") and hasattr(L, "llama_get_memory"):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
    else:
        _first("llama_kv_self_clear", "llama_kv_cache_clear")(ctx)


def decode(ctx, batch, items: list[tuple[int, int, int, bool]]) -> None:
    """items: (token, pos, seq_id, want_logits), at most 512 per call."""
    batch.n_tokens = len(items)
    for i, (tok, pos, seq, logits) in enumerate(items):
        batch.token[i] = tok
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = logits
    rc = L.llama_decode(ctx, batch)
    if rc != 0:
        raise SystemExit(f"llama_decode failed: {rc}")


def argmax(ctx, i: int, n_vocab: int) -> int:
    ptr = L.llama_get_logits_ith(ctx, i)
    row = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))
    return int(row.argmax())


def run_level(ctx, batch, n_vocab: int, n: int, prompt_tokens: int, gen_tokens: int, rng) -> dict:
    clear_kv(ctx)
    prompts = rng.integers(min(300, n_vocab // 2), n_vocab, size=(n, prompt_tokens)).tolist()
    items = [(t, p, s, p == prompt_tokens - 1) for s in range(n) for p, t in enumerate(prompts[s])]
    t0 = time.perf_counter()
    toks = [0] * n
    for start in range(0, len(items), 512):  # logits of a call are readable only until the next call
        chunk = items[start : start + 512]
        decode(ctx, batch, chunk)
        for i, (_, _, seq, want) in enumerate(chunk):
            if want:
                toks[seq] = argmax(ctx, i, n_vocab)
    prefill_s = time.perf_counter() - t0
    steps = []
    for g in range(gen_tokens - 1):
        t = time.perf_counter()
        decode(ctx, batch, [(toks[s], prompt_tokens + g, s, True) for s in range(n)])
        toks = [argmax(ctx, s, n_vocab) for s in range(n)]
        steps.append(time.perf_counter() - t)
    decode_s = sum(steps)
    return {"concurrency": n, "prefill_s": prefill_s, "decode_step_p50_s": float(np.median(steps)),
            "decode_tokens_per_s": n * len(steps) / decode_s, "tokens": n * gen_tokens,
            "output_tokens_per_s": n * gen_tokens / (prefill_s + decode_s)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--levels", default="1,4,8,16")
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--gen-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    # A ggml built with GGML_NATIVE on an AMX CPU puts Q4_0 weights in AMX buffers; on this VM the
    # first tile instruction dies with SIGILL (even after arch_prctl grants the tile state), so the
    # comparison runs with --no-extra-bufts: no AMX and no weight repacking, plain Q4_0 dot products.
    ap.add_argument("--no-extra-bufts", action="store_true", help="no AMX / repacked weight buffers")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    n_seq = max(levels)
    n_ctx = n_seq * (a.prompt_tokens + a.gen_tokens + 16)
    t0 = time.perf_counter()
    model, ctx, n_vocab = load(a.model, a.threads, max(n_ctx, 512), n_seq, not a.no_extra_bufts)
    load_s = time.perf_counter() - t0
    batch = L.llama_batch_init(512, 0, n_seq)
    rng = np.random.default_rng(0)
    run_level(ctx, batch, n_vocab, 1, 8, 3, rng)  # warm-up
    out = [run_level(ctx, batch, n_vocab, n, a.prompt_tokens, a.gen_tokens, rng) for n in levels]
    L.llama_batch_free(batch)
    print(json.dumps({"llama_cpp_version": getattr(L, "__version__", "?"), "load_s": load_s, "levels": out,
                      "extra_bufts": not a.no_extra_bufts,
                      "load_avg": list(os.getloadavg())}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
