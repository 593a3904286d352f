"""Long contexts against llama.cpp: a long prompt's prefill, then decode at growing depths, one sequence.

    .venv/bin/python benchmarks/long_context.py MODEL.gguf [--depths 4096,8192,16384] [--decode-tokens 16]
        [--kv f16|q8_0] [--threads 2] [--rounds 1] [--engines modelc,llamacpp]
        [--llamacpp-python /work/llama/avx512venv/bin/python] [--llamacpp-no-flash-attn] [--json]

Each engine runs in a fresh subprocess (modelc from this tree, llama.cpp from the separate venv that
has llama-cpp-python), in an order that alternates between rounds. Both grow one sequence the same
way: the first depth's prompt in one go (chunks of 512 tokens: modelc's Engine budget and llama.cpp's
n_batch / n_ubatch), timed (prefill tok/s, time to the first sampled token); then --decode-tokens
greedy tokens, timed (decode tok/s at that depth: all of them, and one over the median step, which a step or
two of a thread-count probe does not move); then the prompt continues (prefilled, not timed
for the table, printed as `grow_tok_s`) up to the next depth, and so on. Prompt ids are the same
deterministic ids for both. Also reported per engine: load seconds, peak and final RSS (VmHWM /
VmRSS), and modelc's KV bytes.

llama.cpp runs with flash attention on by default (llama.cpp's own CLI default on a CPU, `-fa auto`, and
what its quantized V cache needs); --llamacpp-no-flash-attn turns it off (f16 only).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
LLAMACPP_PYTHON = "/work/llama/avx512venv/bin/python"
CHUNK = 512

_COMMON = r"""
import json, os, sys, time
def rss():
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                got[k] = int(v.split()[0]) * 1024
    return got
def grow(ids, depths, n_decode, prefill, decode):
    # prefill(ids_chunk, sample) -> first token or None; decode(tok) -> next tok
    res = {"decode_tok_s": {}, "decode_med_tok_s": {}, "grow_tok_s": {}}
    done, tok = 0, None
    for i, depth in enumerate(depths):
        t0 = time.perf_counter()
        part = ids[done:depth]
        tok = prefill(part)
        dt = time.perf_counter() - t0
        if i == 0:
            res["prefill_tok_s"] = len(part) / dt
        else:
            res["grow_tok_s"][str(depth)] = len(part) / dt
        done = depth
        t0 = time.perf_counter()
        steps = []
        for _ in range(n_decode):
            t1 = time.perf_counter()
            tok = decode(tok)
            steps.append(time.perf_counter() - t1)
        res["decode_tok_s"][str(depth)] = n_decode / (time.perf_counter() - t0)
        res["decode_med_tok_s"][str(depth)] = 1.0 / sorted(steps)[len(steps) // 2]
        done += n_decode
        depths[i + 1 :] = [max(d, done + 1) for d in depths[i + 1 :]]
    return res
"""

_LLAMACPP = (
    _COMMON
    + r"""
from llama_cpp import Llama
import llama_cpp
path, threads, n_decode, kv, fa = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
ids, depths = json.loads(sys.stdin.read())
types = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}[kv]
t0 = time.perf_counter()
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=max(depths) + 2 * n_decode * len(depths) + 64,
            n_batch=512, n_ubatch=512, verbose=False, logits_all=False, flash_attn=fa, type_k=types, type_v=types)
load_s = time.perf_counter() - t0
llm.eval(ids[:8]); llm.reset()  # warm-up
def prefill(part):
    llm.eval(part)
    return int(llm.sample(temp=0.0))
def decode(tok):
    llm.eval([tok])
    return int(llm.sample(temp=0.0))
res = grow(ids, depths, n_decode, prefill, decode)
res.update(load_s=load_s, **rss())
print(json.dumps(res))
"""
)

_MODELC = (
    _COMMON
    + r"""
import modelc  # first, as the CLI and the server import it: its thread settings apply only before numpy loads
import numpy as np
from modelc.api.engine import Engine
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, SeqChunk
path, threads, n_decode, kv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ids, depths = json.loads(sys.stdin.read())
tokens = max(depths) + 2 * n_decode * len(depths) + 64
t0 = time.perf_counter()
eng = Engine.load(path, threads=threads, kv_cache_tokens=tokens, kv_dtype={"f16": "float16"}.get(kv, kv))
load_s = time.perf_counter() - t0
from modelc.kernels.runtime import hugepages
hugepages.wait()
runner = eng.runner
runner.warmup()
table = np.arange(runner.kv.num_blocks, dtype=np.int32)
greedy = SamplingParams(temperature=0.0, max_tokens=1 << 30, ignore_eos=True)
state = {"pos": 0, "step": 0, "new": True}
def run(chunk_ids, sample):
    c = SeqChunk(1, np.asarray(chunk_ids, np.int32), state["pos"], table, sample, greedy, len(ids), 0, is_new=state["new"])
    state["new"] = False
    state["step"] += 1
    res = runner.execute(BatchPlan(state["step"], (c,)))
    assert res.error is None, res.error
    state["pos"] += len(chunk_ids)
    return res.tokens[0].token_id if sample else None
def prefill(part):
    tok = None
    for a in range(0, len(part), 512):
        tok = run(part[a : a + 512], a + 512 >= len(part))
    return tok
def decode(tok):
    return run([tok], True)
# warm the thread tuner and the decode path at a short depth, as a served model has long before
for _ in range(2):
    prefill(ids[:48])
    for _ in range(16):
        decode(5)
    state.update(pos=0, new=True)
res = grow(ids, depths, n_decode, prefill, decode)
res.update(load_s=load_s, kv_bytes=int(runner.kv.nbytes), **rss())
print(json.dumps(res))
"""
)


def prompt_ids(n: int, vocab: int) -> list[int]:
    sys.path.insert(0, str(HERE))
    from compare_llamacpp import prompt_ids as ids

    return ids(n, vocab)


def run_engine(engine: str, a: argparse.Namespace, ids: list[int], depths: list[int]) -> dict:
    if engine == "llamacpp":
        cmd = [a.llamacpp_python, "-c", _LLAMACPP, a.model, str(a.threads), str(a.decode_tokens), a.kv,
               "0" if a.llamacpp_no_flash_attn else "1"]  # fmt: skip
    else:
        cmd = [sys.executable, "-c", _MODELC, a.model, str(a.threads), str(a.decode_tokens), a.kv]
    p = subprocess.run(cmd, input=json.dumps([ids, depths]), capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"{engine} failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-3:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--depths", default="4096,8192,16384")
    ap.add_argument("--decode-tokens", type=int, default=16)
    ap.add_argument("--kv", choices=("f16", "q8_0"), default="f16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--engines", default="modelc,llamacpp")
    ap.add_argument("--llamacpp-python", default=LLAMACPP_PYTHON)
    ap.add_argument("--llamacpp-no-flash-attn", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from compare_llamacpp import vocab_size

    depths = sorted(int(d) for d in a.depths.split(","))
    ids = prompt_ids(depths[-1] + 2 * a.decode_tokens * len(depths), vocab_size(a.model))
    engines = [e for e in a.engines.split(",") if e]
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    load = [os.getloadavg()[0]]
    for r in range(a.rounds):
        for e in engines if r % 2 == 0 else engines[::-1]:
            got = run_engine(e, a, ids, list(depths))
            runs[e].append(got)
            print(f"round {r + 1} {e}: {json.dumps(got)}", flush=True)
        load.append(os.getloadavg()[0])
    print(f"load average (1 min) before and after each round: {', '.join(f'{x:.2f}' for x in load)}")
    _table(runs, depths, a)
    if a.json:
        print(json.dumps(runs))
    return 0


def _med(runs: list[dict], *keys: str) -> float:
    vals = []
    for r in runs:
        v = r
        for k in keys:
            v = v[k]
        vals.append(v)
    return statistics.median(vals)


def _table(runs: dict[str, list[dict]], depths: list[int], a: argparse.Namespace) -> None:
    engines = list(runs)
    print(f"\n{a.model}, KV {a.kv}, {a.threads} threads, median of {a.rounds} round(s)")
    rows = [("prefill tok/s", ("prefill_tok_s",))]
    rows += [(f"decode tok/s @ {d}", ("decode_tok_s", str(d))) for d in depths]
    rows += [(f"decode tok/s @ {d}, median step", ("decode_med_tok_s", str(d))) for d in depths]
    rows += [("load s", ("load_s",)), ("peak RSS MB", ("VmHWM",))]
    print("| | " + " | ".join(engines) + (" | ratio |" if len(engines) == 2 else " |"))
    print("|---" * (len(engines) + 1 + (len(engines) == 2)) + "|")
    for label, keys in rows:
        try:
            vals = [_med(runs[e], *keys) for e in engines]
        except KeyError:
            continue
        if keys == ("VmHWM",):
            vals = [v / 1e6 for v in vals]
        cells = [f"{v:.2f}" for v in vals]
        if len(engines) == 2 and keys[0] not in ("VmHWM",):
            ratio = vals[0] / vals[1] if keys != ("load_s",) else vals[1] / vals[0]
            cells.append(f"{ratio:.2f}x")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
