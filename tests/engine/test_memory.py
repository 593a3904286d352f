"""Memory: a model with a large vocabulary keeps no f32 copy of its quantized embedding or output matrix.

The token embedding is a row gather from the stored (quantized) table and the output head runs the quantized
matmul (a tied head reads the same table, repacked once), so serving grows RSS by at most the file, the KV
cache and a little: not by the 4-bytes-a-weight copy a 262k-row vocabulary would cost.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from modelc.artifact import write_artifact
from modelc.artifact.transforms import plan
from modelc.models.tiny import make_tiny_llama

VOCAB, HIDDEN = 262144, 128  # Gemma 3's vocabulary; its embedding is most of a small Gemma's file
MARGIN_BYTES = 24 << 20  # the f32 copy of that table would be 128 MiB

_RSS = """
import gc, sys
from modelc.artifact.reader import open_artifact
from modelc.engine.runner import Runner
sys.path.insert(0, sys.argv[3])
from test_runner import _generate

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

# the same weight types on a small vocabulary first: numba, its kernels and numpy's buffers are resident
small = Runner(open_artifact(sys.argv[1]), num_kv_blocks=8)
small.warmup()
_generate(small, 1, [1, 2, 3], 4, [0])
del small
gc.collect()
base = rss()
big = Runner(open_artifact(sys.argv[2]), num_kv_blocks=8)
big.warmup()
_generate(big, 1, [1, 2, 3], 4, [0])
_generate(big, 2, list(range(1, 80)), 2, [1, 2, 3, 4, 5, 6])  # a 79-token prompt: the table's many-row gather
print("GREW", rss() - base, "KV", big.kv.k.nbytes + big.kv.v.nbytes)
"""


def _quantized(vocab: int, path: pathlib.Path) -> str:
    src = make_tiny_llama(2, vocab_size=vocab, hidden_size=HIDDEN, num_heads=4, num_kv_heads=2,
                          intermediate_size=256, tie=True)  # fmt: skip
    src.tensors, _ = plan(src.tensors, prune=None, quantize="q8_0", quantize_embeddings=True, quantize_output=True)
    return str(write_artifact(src, path))


def test_a_large_vocabulary_costs_its_file_not_an_f32_copy(tmp_path):
    small = _quantized(512, tmp_path / "small.modelc")
    big = _quantized(VOCAB, tmp_path / "big.modelc")
    here = str(pathlib.Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", _RSS, str(small), str(big), here], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "MODELC_HUGEPAGES": "0"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    grew, kv = (int(v) for v in out.stdout.split()[1::2])
    file_bytes = os.path.getsize(big)
    assert file_bytes > 4 * MARGIN_BYTES // 3  # the table is most of the file
    assert grew <= file_bytes + kv + MARGIN_BYTES, (grew, file_bytes, kv)
