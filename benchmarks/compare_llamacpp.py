"""modelc vs llama.cpp (llama-cpp-python) on the same GGUF at the same thread count, interleaved, best of N.

    .venv/bin/python benchmarks/compare_llamacpp.py /tmp/modelc-bench/tinyllama-1.1b-Q4_0.gguf [...]
        [--threads 2] [--prompt-tokens 128] [--decode-tokens 32] [--rounds 3]
        [--llamacpp-python /tmp/kvctx/llvenv/bin/python] [--modelc-env MODELC_NO_AVX512=1 ...]
        [--skip-llamacpp] [--matmul-only] [--write docs/benchmarks.md]

Measures prefill tok/s (one prompt of --prompt-tokens tokens, time to the first sampled token)
and decode tok/s (greedy, the following --decode-tokens tokens). Each round runs modelc (its
`Engine`, in a fresh subprocess of this venv) and llama.cpp (a subprocess of the separate venv
that has llama-cpp-python, never this repo's), in an order that alternates between rounds, so
the load of a shared machine hits both alike; both get the same token ids and warm up first.
Reports the best round of each, the ratio modelc / llama.cpp, and decode's fraction of the
memory bandwidth measured in the same run (bytes of the weights read per token x tok/s over
a streaming read of a 1 GiB buffer with the same thread count: best of 5).

--modelc-env KEY=VAL (repeatable) runs modelc with those variables (e.g. the MODELC_NO_* switches
of an AVX2-only CPU) and its own numba cache dir. --matmul-only times only modelc's linear.matmul
over every 2-D weight of the file (T=1 and T=prompt), i.e. an upper bound that ignores attention,
norms, RoPE and sampling; the table labels it as such.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import numba
import numpy as np

# The environment as given, before modelc.kernels.matmul.linear sets OMP_WAIT_POLICY:
# llama.cpp runs with its own defaults unless the user set something.
_ORIG_ENV = dict(os.environ)

_LLAMACPP_SCRIPT = r"""
import json, sys, time
from llama_cpp import Llama
path, threads, n_prompt, n_decode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ids = json.loads(sys.stdin.read())
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=n_prompt + n_decode + 16,
            n_batch=max(512, n_prompt), verbose=False, logits_all=False)
llm.eval(ids[:8]); llm.reset()  # warm-up
t0 = time.perf_counter(); llm.eval(ids); tok = int(llm.sample(temp=0.0)); t1 = time.perf_counter()
toks = 0
for _ in range(n_decode):
    llm.eval([tok]); tok = int(llm.sample(temp=0.0)); toks += 1
t2 = time.perf_counter()
print(json.dumps({"prefill_tok_s": len(ids) / (t1 - t0), "decode_tok_s": toks / (t2 - t1)}))
"""


def prompt_ids(n: int, vocab: int = 32000, seed: int = 0) -> list[int]:
    """n deterministic ordinary token ids (BOS first) below `vocab`: the same prompt for both engines. Ids
    from 100 where the vocabulary has room (the first ids are often control tokens)."""
    rng = np.random.default_rng(seed)
    return [1, *rng.integers(min(100, vocab // 2), vocab, n - 1).tolist()]


def vocab_size(path: str) -> int:
    """The ids a prompt may use: the GGUF's vocabulary (tokenizer.ggml.tokens; both engines refuse ids past
    it), at most its token embedding's rows."""
    import gguf

    r = gguf.GGUFReader(path)
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    rows = int(max(emb.shape))  # gguf lists dims innermost first: (hidden, vocab)
    tokens = r.fields.get("tokenizer.ggml.tokens")
    return min(rows, len(tokens.data)) if tokens is not None else rows


def run_modelc(path: str, threads: int, ids: list[int], n_decode: int) -> dict:
    from modelc.api.engine import Engine
    from modelc.request import SamplingParams

    t0 = time.perf_counter()
    eng = Engine.load(path, threads=threads, kv_cache_tokens=len(ids) + n_decode + 32)
    load_s = time.perf_counter() - t0
    from modelc.engine import thread_tuner
    from modelc.kernels.runtime import hugepages

    t0 = time.perf_counter()
    hugepages.wait()  # the weights' move onto huge pages after the load (a served model is done in seconds)
    move_s = time.perf_counter() - t0

    # every kernel a request can reach compiled (cold cache) or loaded: the sync Engine compiles on first use,
    # so a cold round's timed 128-token prefill compiled its kernels (12-17 tok/s against ~80-100, Zen 3)
    eng.runner.warmup()
    greedy = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    # then short and long prefill and decode, long enough for the thread tuner's first probe (a served model
    # has finished it long before)
    list(eng.generate_ids(ids[:8], greedy))
    probe = SamplingParams(max_tokens=4 + thread_tuner.WARM_STEPS, temperature=0.0, ignore_eos=True)
    list(eng.generate_ids(ids[: min(len(ids), 48)], probe))
    p = SamplingParams(max_tokens=n_decode + 1, temperature=0.0, ignore_eos=True)
    it = eng.generate_ids(ids, p)
    t0 = time.perf_counter()
    next(it)
    t1 = time.perf_counter()
    n = sum(1 for _ in it)
    t2 = time.perf_counter()
    return {"load_s": load_s, "move_s": move_s, "prefill_tok_s": len(ids) / (t1 - t0), "decode_tok_s": n / (t2 - t1)}


def run_matmul_only(path: str, threads: int, n_prompt: int) -> dict:
    """linear.matmul over every 2-D weight (output.weight once), no other layer work."""
    import gguf

    from modelc.ir import DataType, TensorData
    from modelc.kernels.matmul import linear

    numba.set_num_threads(threads)
    r = gguf.GGUFReader(path)
    ws = []
    for t in r.tensors:
        if len(t.shape) != 2 or t.name == "token_embd.weight":
            continue
        dt = DataType.from_ggml(int(t.tensor_type))
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        ws.append(linear.prepare_weight(TensorData(shape, dt, np.asarray(t.data).reshape(-1).view(np.uint8))))
    res = {}
    for label, tokens in (("decode_tok_s", 1), ("prefill_tok_s", n_prompt)):
        x = {w.cols: np.random.default_rng(0).standard_normal((tokens, w.cols)).astype(np.float32) for w in ws}
        outs = [np.empty((tokens, w.rows), np.float32) for w in ws]
        seen = set()
        for w, o in zip(ws, outs, strict=True):  # warm-up: compile / load each kernel variant once
            if w.dtype not in seen:
                seen.add(w.dtype)
                linear.matmul(o, x[w.cols], w)
        reps = 3 if tokens == 1 else 1
        t0 = time.perf_counter()
        for _ in range(reps):
            for w, o in zip(ws, outs, strict=True):
                linear.matmul(o, x[w.cols], w)
        res[label] = tokens * reps / (time.perf_counter() - t0)
    return res


def run_llamacpp(python: str, path: str, threads: int, ids: list[int], n_decode: int, passive: bool = False) -> dict:
    cmd = [python, "-c", _LLAMACPP_SCRIPT, path, str(threads), str(len(ids)), str(n_decode)]
    env = dict(_ORIG_ENV, OMP_WAIT_POLICY="passive") if passive else _ORIG_ENV
    p = subprocess.run(cmd, input=json.dumps(ids), capture_output=True, text=True, timeout=1800, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"llama-cpp-python failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def weight_bytes_per_token(path: str) -> int:
    """Bytes of the weights a decode step reads: every 2-D tensor but the token embedding (one row)."""
    import gguf

    r = gguf.GGUFReader(path)
    return sum(int(t.n_bytes) for t in r.tensors if len(t.shape) == 2 and t.name != "token_embd.weight")


def memory_bandwidth(threads: int, nbytes: int = 1 << 30, rounds: int = 5) -> float:
    """Bytes/s of a streaming read of an nbytes buffer split over `threads` numpy reductions (they release
    the GIL), best of `rounds`: the ceiling a decode that reads every weight once per token can reach."""
    import threading

    buf = np.ones(nbytes // 8, np.uint64)  # touched: really in memory
    parts = np.array_split(buf, threads)
    best = 0.0
    for _ in range(rounds):
        ts = [threading.Thread(target=np.bitwise_or.reduce, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        best = max(best, nbytes / (time.perf_counter() - t0))
    return best


_MODELC_CHILD = r"""
import modelc  # first, as in the CLI and the server: its thread settings apply only before numpy loads
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("cmp", sys.argv[1])
cmp = importlib.util.module_from_spec(spec); spec.loader.exec_module(cmp)
path, threads, n_prompt, n_decode, mode = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
if mode == "matmul":
    r = cmp.run_matmul_only(path, threads, n_prompt)
else:
    r = cmp.run_modelc(path, threads, cmp.prompt_ids(n_prompt, cmp.vocab_size(path)), n_decode)
print(json.dumps(r))
"""


def run_modelc_child(path: str, a: argparse.Namespace) -> dict:
    env = dict(os.environ)
    if a.modelc_env:
        env.update(kv.split("=", 1) for kv in a.modelc_env)
        tag = "-".join(sorted(k.split("=", 1)[0].removeprefix("MODELC_").lower() for k in a.modelc_env))
        env.setdefault("NUMBA_CACHE_DIR", f"/tmp/modelc-numba-{tag}")  # compiled for other CPU flags
    mode = "matmul" if a.matmul_only else "engine"
    cmd = [sys.executable, "-c", _MODELC_CHILD, __file__, path, str(a.threads), str(a.prompt_tokens),
           str(a.decode_tokens), mode]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"modelc failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-3:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def to_markdown(rows: list[dict], a: argparse.Namespace, bw: float, load0: tuple) -> str:
    load = os.getloadavg()
    env = " ".join(a.modelc_env or []) or "default"
    lines = [
        "## modelc vs llama.cpp",
        "",
        f"`benchmarks/compare_llamacpp.py --rounds {a.rounds}`, {a.threads} threads, prompt {a.prompt_tokens} tokens, "
        f"{a.decode_tokens} greedy decode tokens, best of {a.rounds} interleaved rounds; modelc env: {env}; "
        f"llama.cpp: {a.llamacpp_python}; {os.cpu_count()} CPUs, load average {load0[0]:.1f} -> {load[0]:.1f}; "
        f"measured memory bandwidth {bw / 1e9:.1f} GB/s ({a.threads} threads); "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| model | weights/token | engine | prefill tok/s best (median) | decode tok/s best (median) | decode x bytes / bandwidth |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['bytes'] / 1e6:.0f} MB | {r['engine']} | {r['prefill_best']:.1f} ({r['prefill_med']:.1f}) "
            f"| {r['decode_best']:.2f} ({r['decode_med']:.2f}) | {r['decode_best'] * r['bytes'] / bw:.0%} |"
        )
    models = sorted({r["model"] for r in rows}, key=[r["model"] for r in rows].index)
    ratio = []
    for m in models:
        mc = [r for r in rows if r["model"] == m and r["engine"].startswith("modelc")]
        ll = [r for r in rows if r["model"] == m and r["engine"] == "llama.cpp"]
        if mc and ll:
            ratio.append(f"{m}: decode {mc[0]['decode_best'] / ll[0]['decode_best']:.2f}x, "
                         f"prefill {mc[0]['prefill_best'] / ll[0]['prefill_best']:.2f}x")  # fmt: skip
    if ratio:
        lines += ["", "modelc / llama.cpp (best rounds): " + "; ".join(ratio) + "."]
    return "\n".join(lines) + "\n"


def _summary(model: str, engine: str, nbytes: int, rs: list[dict]) -> dict:
    import statistics

    pre, dec = [r["prefill_tok_s"] for r in rs], [r["decode_tok_s"] for r in rs]
    return {"model": model, "engine": engine, "bytes": nbytes, "prefill_best": max(pre),
            "prefill_med": statistics.median(pre), "decode_best": max(dec), "decode_med": statistics.median(dec)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--llamacpp-python", default="/tmp/kvctx/llvenv/bin/python")
    ap.add_argument("--modelc-env", action="append", default=[], help="KEY=VAL for modelc's process (repeatable)")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument(
        "--llamacpp-passive",
        action="store_true",
        help="run llama.cpp with OMP_WAIT_POLICY=passive (as modelc's threads)",
    )
    ap.add_argument("--matmul-only", action="store_true", help="time modelc's matmuls only (upper bound)")
    ap.add_argument("--write", type=pathlib.Path, default=None)
    a = ap.parse_args(argv)
    load0 = os.getloadavg()
    bw = memory_bandwidth(a.threads)
    print(f"memory bandwidth ({a.threads} threads): {bw / 1e9:.1f} GB/s", flush=True)
    rows = []
    label = "modelc matmuls only (upper bound)" if a.matmul_only else "modelc"
    for path in a.gguf:
        name, nbytes = pathlib.Path(path).stem, weight_bytes_per_token(path)
        ids = prompt_ids(a.prompt_tokens, vocab_size(path))
        mine: list[dict] = []
        theirs: list[dict] = []
        for i in range(a.rounds):
            order = ("modelc", "llama.cpp") if i % 2 == 0 else ("llama.cpp", "modelc")
            for eng in order:
                if eng == "modelc":
                    mine.append(run_modelc_child(path, a))
                    print(f"{name} round {i + 1} modelc {mine[-1]}", flush=True)
                elif not a.skip_llamacpp:
                    theirs.append(run_llamacpp(a.llamacpp_python, path, a.threads, ids, a.decode_tokens,
                                               passive=a.llamacpp_passive))  # fmt: skip
                    print(f"{name} round {i + 1} llama.cpp {theirs[-1]}", flush=True)
        rows.append(_summary(name, label, nbytes, mine))
        if theirs:
            rows.append(_summary(name, "llama.cpp", nbytes, theirs))
    md = to_markdown(rows, a, bw, load0)
    print(md)
    if a.write:
        sys.path.insert(0, str(pathlib.Path(__file__).parent))
        from kernels import write_section  # benchmarks/kernels.py

        write_section(a.write, md, "## modelc vs llama.cpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
