"""modelc's perplexity vs llama.cpp's (llama-cpp-python, all logits, F32 KV) on the same GGUF, text and ctx.

    PYTHONPATH=. .venv/bin/python benchmarks/perplexity_vs_llamacpp.py MODEL.gguf [...] --text FILE
        [--ctx 256] [--max-chunks 8] [--threads 2] [--llamacpp-python /path/to/python-with-llama_cpp]

Both engines score the same token ids (modelc's tokenization; whether llama.cpp's tokenizer gives
the same ids is reported too) by llama-perplexity's rule: disjoint chunks of ctx tokens, the first
replaced by BOS, the second half scored. llama.cpp runs in a subprocess of a separate venv (never a
dependency of this repo), each chunk evaluated from an empty KV cache with logits_all.
"""

from __future__ import annotations

import argparse
import json
import subprocess

import numpy as np

_LLAMACPP = r"""
import json, math, sys
import numpy as np
from llama_cpp import Llama
req = json.loads(sys.stdin.read())
llm = Llama(req["model"], n_ctx=req["ctx"], n_batch=req["ctx"], n_ubatch=req["ctx"], logits_all=True,
            n_threads=req["threads"], type_k=0, type_v=0, verbose=False)  # type 0 = GGML_TYPE_F32
text_ids = llm.tokenize(req["text"].encode(), add_bos=True, special=False)
ctx, first, bos = req["ctx"], req["ctx"] // 2, llm.token_bos()
toks = req["ids"]
nll, count = 0.0, 0
for i in range(req["chunks"]):
    chunk = toks[i * ctx:(i + 1) * ctx]
    chunk = [bos] + chunk[1:] if req["add_bos"] else chunk
    llm.reset()
    llm.eval(chunk)
    lg = np.asarray(llm.scores[:ctx], np.float64)
    for j in range(first, ctx - 1):
        row = lg[j]
        m = row.max()
        nll += math.log(np.exp(row - m).sum()) + m - row[toks[i * ctx + j + 1]]
        count += 1
same = sum(1 for a, b in zip(text_ids, req["all_ids"]) if a == b)
print(json.dumps({"ppl": math.exp(nll / count), "count": count, "tokenize_equal": text_ids == req["all_ids"],
                  "num_tokens": [len(text_ids), len(req["all_ids"])], "first_diff": same}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--text", required=True)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--max-chunks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llamacpp-python", default="/work/refvenv/bin/python")
    a = ap.parse_args()
    from modelc.api.engine import Engine

    text = open(a.text, encoding="utf-8").read()
    rows = []
    for path in a.models:
        eng = Engine.load(path, threads=a.threads, kv_cache_tokens=16)
        ids = eng.tokenize(text)
        chunks = min(len(ids) // a.ctx, a.max_chunks)
        ids_used = ids[: max(chunks * a.ctx, 2 * a.ctx)]
        add_bos = eng.tokenizer.adds_bos
        ours = eng.perplexity(ids_used, ctx=a.ctx)  # ids of a model with a tokenizer: BOS rule as for text
        req = {"model": path, "ctx": a.ctx, "threads": a.threads, "text": text, "ids": ids_used, "all_ids": ids,
               "chunks": ours.num_chunks, "add_bos": bool(add_bos)}  # fmt: skip
        out = subprocess.run([a.llamacpp_python, "-c", _LLAMACPP], input=json.dumps(req), capture_output=True,
                             text=True, timeout=3600)  # fmt: skip
        if out.returncode != 0:
            raise SystemExit(out.stderr[-2000:])
        theirs = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append({"model": path, "ctx": a.ctx, "chunks": ours.num_chunks, "scored": ours.num_scored,
                     "modelc_ppl": ours.ppl, "llamacpp_ppl": theirs["ppl"], "llamacpp_scored": theirs["count"],
                     "rel_diff": ours.ppl / theirs["ppl"] - 1, "tokenize_equal": theirs["tokenize_equal"],
                     "num_tokens_llamacpp_modelc": theirs["num_tokens"]})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
