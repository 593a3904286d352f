"""Where a decode token's time goes: every KernelSet entry of the model (and the matmul kernels under
linear.matmul) wrapped in a timer, over greedy decode steps after a 128-token prompt (--prompt-tokens: the
context attention reads); best of 3 rounds.

    PYTHONPATH=. python benchmarks/decode_profile.py MODEL.gguf [--threads 2] [--tokens 32] [--streams N]
        [--per-layer | --unfused] [--prompt-tokens 128]

With --streams N, N sequences (16-token prompts) decode together and the figures are per batched step.
Where every layer runs in kernels/layer/decode_step.py's one call, that call is one line; --per-layer runs the
layers as one call each instead (runs of one layer, models/llama_decode.DecodeRuns); --unfused runs the forward's
general path instead of the decode layers, so each kernel has its line (with its Python glue between them).

Prints ms per token, calls per token and us per call of each, the Python glue in the forward (forward
minus its kernel calls) and the engine's share (step minus forward). The timers cost ~0.3 us per call.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import time

import numpy as np

from modelc.api.engine import Engine
from modelc.kernels.layer import decode_step, moe_ffn
from modelc.kernels.matmul import gemm_fused, gemm_fused_k, gemm_r16
from modelc.kernels.quant import quant
from modelc.models import llama_decode
from modelc.request import SamplingParams

acc: dict[str, float] = collections.defaultdict(float)
cnt: collections.Counter = collections.Counter()


def timed(name: str, f):
    def w(*args, **kw):
        t0 = time.perf_counter()
        r = f(*args, **kw)
        acc[name] += time.perf_counter() - t0
        cnt[name] += 1
        return r

    return w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--streams", type=int, default=1, help="sequences decoding together (per-step figures)")
    ap.add_argument("--per-layer", action="store_true", help="one call a layer, not decode_step's one call a step")
    ap.add_argument("--unfused", action="store_true", help="every kernel called from the forward (no fused layers)")
    ap.add_argument("--prompt-tokens", type=int, default=128, help="the one stream's prompt (its context)")
    a = ap.parse_args()
    kv = max(512, a.streams * (a.tokens + 64), a.prompt_tokens + a.tokens + 64)
    eng = Engine.load(a.model, threads=a.threads, kv_cache_tokens=kv)
    ids = [1, *np.random.default_rng(0).integers(100, eng.runner.vocab_size, a.prompt_tokens - 1).tolist()]
    warm = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    list(eng.generate_ids(ids[:8], warm))
    list(eng.generate_ids(ids[:48], warm))
    model = eng.runner.model
    if a.per_layer and model.decode is not None:
        model.decode = llama_decode.DecodeRuns(model.decode.plans, longest=1)
    if a.unfused:
        model.decode = None
    K = model.kernels
    # (moe_ffn: timed below as the kernel the forward may also call directly)
    model.kernels = dataclasses.replace(
        K,
        **{
            f.name: timed(f.name, getattr(K, f.name))
            for f in dataclasses.fields(K)
            if f.name not in ("name", "moe_ffn")
        },
    )
    moe_ffn._moe_ffn = timed("moe_ffn kernel", moe_ffn._moe_ffn)
    # under linear.matmul (it calls them through their modules)
    quant.quantize_act = timed("  quantize_act", quant.quantize_act)
    gemm_r16.matmul_f32 = timed("  r16 kernel + quantize", gemm_r16.matmul_f32)
    # a one-token step's decode layers (models/llama_decode.py): their kernels run inside these calls, a run of
    # layers each
    decode_step.decode_layers = timed("decode layers (a run)", decode_step.decode_layers)
    decode_step.decode_layers_moe = timed("decode layers (a run)", decode_step.decode_layers_moe)
    decode_step.attention_layers = timed("attention layer", decode_step.attention_layers)
    gemm_fused_k.qmatvec_k = timed("  matvec_k kernel", gemm_fused_k.qmatvec_k)
    gemm_fused.qmatvec = timed("  matvec kernel", gemm_fused.qmatvec)
    model.forward = timed("forward", model.forward)
    best = None
    for r in range(3):
        per, n = (_one_stream(eng, ids, a.tokens) if a.streams == 1 else
                  _batched(eng, a.streams, a.tokens, np.random.default_rng(r)))  # fmt: skip
        if best is None or per < best[0]:
            best = (per, dict(acc), dict(cnt), n)
    per, got, calls, n = best
    unit = "token" if a.streams == 1 else "step"
    print(f"{a.model}: {1e3 * per:.2f} ms/{unit} ({a.streams / per:.2f} tok/s), {a.streams} stream(s), "
          f"{a.threads} threads")  # fmt: skip
    for k in sorted(got, key=lambda k: -got[k]):
        print(
            f"  {k:20s} {1e3 * got[k] / n:7.2f} ms/{unit} {calls[k] / n:6.1f} calls/{unit} {1e6 * got[k] / calls[k]:8.1f} us/call"
        )
    kernels = sum(v for k, v in got.items() if k != "forward" and not k.startswith(" "))
    print(f"  python glue in forward {1e3 * (got['forward'] - kernels) / n:.2f} ms/{unit}; "
          f"engine (step - forward) {1e3 * (per - got['forward'] / n):.2f} ms/{unit}")  # fmt: skip


def _one_stream(eng: Engine, ids: list[int], tokens: int) -> tuple[float, int]:
    """Seconds per token over `tokens` greedy steps after the prompt's first token; the step count."""
    it = eng.generate_ids(ids, SamplingParams(max_tokens=tokens + 1, temperature=0.0, ignore_eos=True))
    next(it)
    acc.clear()
    cnt.clear()
    t0 = time.perf_counter()
    n = sum(1 for _ in it)
    return (time.perf_counter() - t0) / n, n


def _batched(eng: Engine, streams: int, tokens: int, rng: np.random.Generator) -> tuple[float, int]:
    """Seconds per step over `tokens` steps in which all `streams` sequences decode together; the step count."""
    from modelc.cache.block_pool import BlockPool
    from modelc.engine.core import EngineCore
    from modelc.scheduler.output import TokenEmitted
    from modelc.scheduler.scheduler import Scheduler
    from modelc.scheduler.sequence import Sequence

    # the one-request Engine's scheduler, widened to `streams` sequences
    config = dataclasses.replace(eng.core.scheduler.config, max_num_seqs=streams, max_queue=streams)
    core = EngineCore(Scheduler(config, BlockPool(eng.runner.num_kv_blocks, enable_prefix_caching=False)), eng.runner)
    params = SamplingParams(max_tokens=tokens + 8, temperature=0.0, ignore_eos=True)
    vocab = eng.runner.vocab_size
    base = 1_000_000 + 1000 * int(rng.integers(1000))
    for i in range(streams):
        core.add(Sequence(base + i, [1, *rng.integers(100, vocab, 15).tolist()], params))
    started: set[int] = set()
    while len(started) < streams:  # prefill (chunks) until every sequence has its first token
        started |= {ev.seq_id for ev in core.step() if isinstance(ev, TokenEmitted)}
    acc.clear()
    cnt.clear()
    t0 = time.perf_counter()
    for _ in range(tokens):
        core.step()
    per = (time.perf_counter() - t0) / tokens
    core.abort_all()
    core.release()
    return per, tokens


if __name__ == "__main__":
    main()
