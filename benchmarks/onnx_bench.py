"""ONNX latency: modelc's plan interpreter vs onnxruntime on the same graphs and thread count.

    .venv/bin/python benchmarks/onnx_bench.py [--threads 1] [--seconds 3] [--model extra.onnx ...]

Graphs (built with onnx.helper, see tests/onnx/onnx_graphs.py): an MLP 784-512-256-10 at batch
1 and 32, a BERT-base-like pre-LN transformer block (C=384, 12 heads, F=1536) at T=128, and any
--model files (inputs filled with seeded random values; integer inputs with small ids).
The engines alternate call by call; figures are the median of each. One JSON line per case.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def graphs_module():
    spec = importlib.util.spec_from_file_location("onnx_graphs", ROOT / "tests" / "onnx" / "onnx_graphs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cases(tmp: pathlib.Path, extra: list[str]):
    import numpy as np

    g = graphs_module()
    rng = np.random.default_rng(0)
    mlp = g.save(g.mlp(rng, sizes=(784, 512, 256, 10)), tmp / "mlp.onnx")
    for batch in (1, 32):
        yield f"mlp-784-512-256-10 batch {batch}", mlp, {"x": rng.standard_normal((batch, 784)).astype(np.float32)}
    block = g.save(g.transformer_block(rng, C=384, H=12, F_=1536), tmp / "block.onnx")
    mask = np.ones((1, 128), np.int64)
    yield (
        "transformer block C=384 T=128",
        block,
        {"x": rng.standard_normal((1, 128, 384)).astype(np.float32), "mask": mask},
    )
    for path in extra:
        yield pathlib.Path(path).name, pathlib.Path(path), random_feeds(pathlib.Path(path), rng)


def random_feeds(path: pathlib.Path, rng) -> dict:

    from modelc.formats.onnx import read_onnx
    from modelc.onnx.feeds import declared_dtype

    feeds = {}
    for spec in read_onnx(path).metadata["onnx.execution_plan"]["inputs"]:
        shape = [
            d if isinstance(d, int) and d > 0 else (1 if i == 0 else 32) for i, d in enumerate(spec["shape"] or [])
        ]
        dt = declared_dtype(spec)
        feeds[spec["name"]] = (rng.integers(1, 100, shape) if dt.kind in "iu" else rng.standard_normal(shape)).astype(
            dt
        )
        if "mask" in spec["name"]:
            feeds[spec["name"]][:] = 1
    return feeds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--model", action="append", default=[])
    args = ap.parse_args()

    import numpy as np
    import onnxruntime as ort

    from modelc.formats.onnx import read_onnx
    from modelc.onnx import OnnxProgram

    with tempfile.TemporaryDirectory() as d:
        for name, path, feeds in cases(pathlib.Path(d), args.model):
            prog = OnnxProgram(read_onnx(path))
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            got = prog.run(feeds)
            want = sess.run(None, feeds)
            err = max(
                float(np.abs(got[o.name] - w).max() / max(np.abs(w).max(), 1e-30))
                for o, w in zip(sess.get_outputs(), want, strict=True)
            )
            tm, to = [], []
            start = time.perf_counter()
            while time.perf_counter() - start < args.seconds or len(tm) < 5:
                t = time.perf_counter()
                prog.run(feeds)
                tm.append(time.perf_counter() - t)
                t = time.perf_counter()
                sess.run(None, feeds)
                to.append(time.perf_counter() - t)
            m, o = float(np.median(tm)), float(np.median(to))
            row = {"case": name, "threads": args.threads, "runs": len(tm), "modelc_ms": round(m * 1e3, 3),
                   "onnxruntime_ms": round(o * 1e3, 3), "speed_vs_ort": round(o / m, 2), "max_rel_err": err}  # fmt: skip
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    _threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(var, _threads)
    main()
