"""llama.cpp's logits deviation with a q8_0 KV cache (type_k = type_v = q8_0) from its F32 KV, for comparison
with modelc's (benchmarks/kv_cache.py --deviation-model). Run with a Python that has llama-cpp-python (a
separate venv, never this repo's):

    /path/to/python benchmarks/kv_deviation_llamacpp.py MODEL.gguf

Same 1024 token ids as kv_cache.py (seed 0); flash attention on for both runs (llama.cpp needs it for a
quantized V cache); head_dim must be a multiple of 32 there.
"""

import json
import sys

import numpy as np
from llama_cpp import Llama

path = sys.argv[1]
ids = np.random.default_rng(0).integers(3, 32000, 1024).tolist()


def run(tk, fa):
    llm = Llama(
        path,
        n_ctx=1024,
        n_batch=1024,
        n_ubatch=1024,
        logits_all=True,
        n_threads=2,
        type_k=tk,
        type_v=tk,
        flash_attn=fa,
        verbose=False,
    )
    llm.eval(ids)
    return np.asarray(llm.scores[:1024], np.float64)


ref = run(0, True)
got = run(8, True)
cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
print(
    json.dumps(
        {
            "max_abs_rel": float(np.abs(got - ref).max() / np.abs(ref).max()),
            "mean_cosine": float(cos.mean()),
            "min_cosine": float(cos.min()),
            "top1_agree": float((got.argmax(1) == ref.argmax(1)).mean()),
        }
    )
)
