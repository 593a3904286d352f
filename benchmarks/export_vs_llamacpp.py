"""HF models exported by `modelc export --to gguf`, run by llama.cpp: logits and tokenization vs modelc.

    .venv/bin/python benchmarks/export_vs_llamacpp.py [--llamacpp-python /work/refvenv/bin/python]
        [--cases llama3,phi3,...] [--keep DIR]

For every case of tests/formats/test_export_gguf_hf.py (the tiny LLaMA 3 / Mistral / Qwen2 / Phi-3
variants, a tiny GPT-2, LLaMA 3 and Qwen2 style pre-tokenizers), the refused ones, and tiny models
carrying llama.cpp's real gpt-2 / llama-bpe / qwen2 test vocabularies (../shared/fixtures): packs the
source, exports it to GGUF, computes modelc's logits on the source (T=48 tokens) and its
tokenization of the test texts, then loads the GGUF in llama.cpp (llama-cpp-python, in its own
venv, as a subprocess: this file with --worker) and compares: per-position cosine of the logits
(pass: every position >= 0.999; for a sliding window shorter than the prompt, every position
inside the window, since llama.cpp's llama/qwen2/phi3 graphs attend past it), max |diff| / max |modelc|, argmax agreement, and the texts whose
llama.cpp tokenization (llm.tokenize with parse_special, with and without add_special) differs
from modelc's.
Quantized cases (a variant packed to q8_0 / q4_0, exported block for block): llama.cpp quantizes
the activations too, so they pass on the same weights dequantized to F32 (an F32 export run by
llama.cpp vs modelc on the quantized artifact), and the cosine between llama.cpp's runs of the
two files is printed beside.
Where llama.cpp's own conversion of the same HF folder exists (tiny-llama), the tokenizations are
also compared with llama.cpp's on that file: a mismatch with modelc that llama.cpp shows on its own
conversion too (HF's Metaspace prepend_scheme "first" vs llama.cpp's SentencePiece dummy prefix)
is llama.cpp's, not the export's, and the case passes when every token list is identical.
Not a test: needs llama-cpp-python; prints one line per case and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
N_TOKENS = 48
MIN_COSINE = 0.999


def worker(path: str) -> int:
    """llama.cpp side (llama-cpp-python's venv; no modelc imports): stdin {ids, texts} -> stdout JSON."""
    import numpy as np
    from llama_cpp import Llama

    req = json.loads(sys.stdin.read())
    llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2, logits_all=True, verbose=False)
    llm.eval(req["ids"])
    logits = np.asarray(llm.scores[: len(req["ids"])], dtype=np.float32)  # (T, V)
    toks = {
        mode: [llm.tokenize(t.encode("utf-8"), add_bos=mode == "special", special=True) for t in req["texts"]]
        for mode in ("plain", "special")
    }
    print(json.dumps({"logits": logits.tolist(), "tokens": toks}))
    return 0


def quantized(variant: str, kind: str):
    """A builder of the packed (quantized) artifact of a tests/fixtures variant."""

    def make():
        from modelc.artifact import open_artifact
        from modelc.pack import pack

        folder = pathlib.Path(tempfile.mkdtemp())
        hf = ROOT / "tests" / "fixtures" / "models" / "variants" / variant / "hf"
        return open_artifact(pack(hf, out=folder / f"{variant}-{kind}.modelc", quantize=kind))

    return make


def vocab_cases(shared: pathlib.Path) -> dict:
    """Real vocabularies (llama.cpp's ggml-vocab-*.gguf test files, as modelc reads them into tokenizer.json)
    on tiny random models: name -> (build, extra texts: llama.cpp's own vocab test inputs)."""
    from modelc.formats.gguf import read_gguf
    from modelc.models.tiny import make_tiny_gpt2, make_tiny_llama

    def build(vocab: str, arch: str):
        def make():
            v = read_gguf(shared / f"ggml-vocab-{vocab}.gguf")
            n = len(json.loads(v.tokenizer_json)["model"]["vocab"])
            n = max(n, *(a["id"] + 1 for a in json.loads(v.tokenizer_json)["added_tokens"]))
            if arch == "gpt2":
                m = make_tiny_gpt2(0, vocab_size=n, hidden_size=32, max_positions=256)
            else:
                m = make_tiny_llama(0, vocab_size=n, hidden_size=32, num_heads=2, num_kv_heads=1,
                                    intermediate_size=32, qkv_bias=arch == "qwen2", architecture=arch)  # fmt: skip
            m.tokenizer_json, m.special_tokens = v.tokenizer_json, v.special_tokens
            return m

        return make

    out = {}
    for vocab, arch in (("gpt-2", "gpt2"), ("llama-bpe", "llama"), ("qwen2", "qwen2")):
        if (shared / f"ggml-vocab-{vocab}.gguf").exists():
            inp = (shared / f"ggml-vocab-{vocab}.gguf.inp").read_text(encoding="utf-8")
            out[f"vocab-{vocab}"] = (build(vocab, arch), inp.split("\n__ggml_vocab_test__\n"), None)
    for base, kind in (("mistral", "q8_0"), ("llama3", "q4_0")):  # GGML blocks, q/k block rows permuted whole
        out[f"{base}-{kind}"] = (quantized(base, kind), [], None)
    spm = shared.parent / "models" / "tiny-llama" / "hf"
    if spm.is_dir():  # LLaMA 2 style SentencePiece BPE (byte_fallback) -> tokenizer.ggml.model "llama"
        from modelc.formats.detect import read_model

        inp = (shared / "ggml-vocab-llama-spm.gguf.inp").read_text(encoding="utf-8")
        ref = spm.parent / "gguf" / "tiny-llama-F32.gguf"
        out["tiny-llama-spm"] = (lambda: read_model(spm), inp.split("\n__ggml_vocab_test__\n"), ref)
    return out


def run_case(
    name: str, build, tmp: pathlib.Path, llamacpp_python: str, extra_texts: list[str], ref_gguf: pathlib.Path | None
) -> dict:
    import numpy as np

    from modelc.api.engine import Engine
    from modelc.artifact import open_artifact, write_artifact
    from modelc.errors import UnsupportedError
    from modelc.formats.export_gguf import export_gguf
    from modelc.tokenizer import Tokenizer
    from tests.formats.test_export_gguf_hf import TEXTS

    texts = [*TEXTS, *extra_texts]
    src = build()
    art = open_artifact(write_artifact(src, tmp / f"{name}.modelc"))
    try:
        path = export_gguf(art, tmp / f"{name}.gguf")
    except UnsupportedError as e:
        return {"case": name, "refused": str(e)}
    tok = Tokenizer.from_json(src.tokenizer_json, src.special_tokens)
    ids = tok.encode(" ".join(TEXTS[:12]))[:N_TOKENS]
    want = Engine(art).logits(ids)  # (T, V)
    got_all = _llamacpp(llamacpp_python, path, ids, texts)
    if "llamacpp_failed" in got_all:
        return {"case": name, **got_all}
    got = np.asarray(got_all["logits"], dtype=np.float32)
    cos = _cosines(got, want)
    # plain: no BOS/EOS; special: as llama.cpp adds them (modelc never doubles a BOS the text starts with)
    tok_diff = [t for t, g in zip(texts, got_all["tokens"]["plain"], strict=True) if g != tok.encode(t, False)]
    bos = src.special_tokens.get("bos_token")
    tok_diff += [
        f"(add_special) {t}"
        for t, g in zip(texts, got_all["tokens"]["special"], strict=True)
        if not (bos and t.startswith(bos)) and g != tok.encode(t)
    ]
    # llama.cpp's llama/qwen2/phi3 graphs have no sliding window: past it they attend to every key,
    # so only the positions inside the window can agree (the export writes the window for modelc).
    window = int(src.config.get("sliding_window") or 0)
    checked = cos[:window] if 0 < window < len(ids) else cos
    vs_converter = {}
    if ref_gguf is not None:  # the same HF folder converted by llama.cpp's convert_hf_to_gguf.py
        ref = _llamacpp(llamacpp_python, ref_gguf, ids, texts)
        vs_converter = {
            "converter_same_tokens": ref["tokens"] == got_all["tokens"],
            "converter_max_abs_logit_diff": float(np.abs(np.asarray(ref["logits"]) - got).max()),
        }
    if any(t.dtype.is_quantized for t in src.tensors.values()):
        # GGML blocks: llama.cpp also quantizes the activations, so its logits move off modelc's by that
        # rounding; the same weights dequantized to F32 separate the file's layout from the arithmetic.
        f32 = _llamacpp(llamacpp_python, export_gguf(_dequantized(src), tmp / f"{name}-f32.gguf"), ids, texts)
        ref = np.asarray(f32["logits"], dtype=np.float32)
        vs_converter = {
            "min_cosine_vs_modelc_on_f32_copy": float(_cosines(ref, want).min()),
            "min_cosine_llamacpp_q_vs_f32": float(_cosines(got, ref).min()),
        }
        checked = _cosines(ref, want)
    tok_ok = not tok_diff or vs_converter.get("converter_same_tokens", False)
    return {
        "case": name,
        "T": len(ids),
        **({"window": window, "min_cosine_in_window": float(checked.min())} if len(checked) < len(cos) else {}),
        "min_cosine": float(cos.min()),
        "first_bad_pos": int(np.argmax(cos < MIN_COSINE)) if (cos < MIN_COSINE).any() else None,
        "max_rel_diff": float(np.abs(got - want).max() / np.abs(want).max()),
        "argmax_agree": float((got.argmax(1) == want.argmax(1)).mean()),
        "tokenize_mismatch": tok_diff,
        **vs_converter,
        "pass": bool(checked.min() >= MIN_COSINE and tok_ok),
    }


def _cosines(a, b):
    import numpy as np

    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))  # (T,)


def _dequantized(src):
    """`src` as an F32 Model (GGML blocks dequantized), everything else as it is."""
    from modelc.formats.export_safetensors import dequantized
    from modelc.ir import Model, TensorData

    tensors = {
        n: TensorData.from_array(dequantized(t, None)) if t.dtype.is_quantized else t for n, t in src.tensors.items()
    }
    return Model(src.name, src.architecture, tensors, dict(src.config), dict(src.metadata or {}), src.tokenizer_json,
                 src.chat_template, dict(src.special_tokens or {}), naming=src.naming)  # fmt: skip


def _llamacpp(python: str, path: str | os.PathLike[str], ids: list[int], texts: list[str]) -> dict:
    proc = subprocess.run(
        [python, __file__, "--worker", str(path)],
        input=json.dumps({"ids": ids, "texts": texts}),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return {"llamacpp_failed": proc.returncode, "stderr": (proc.stderr or proc.stdout).strip().splitlines()[-3:]}
    return json.loads(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--llamacpp-python", default="/work/refvenv/bin/python")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument(
        "--shared",
        default=str(ROOT.parent / "shared" / "fixtures" / "tokenizer"),
        help="llama.cpp's ggml-vocab-*.gguf files (+ .inp texts); absent: those cases are skipped",
    )
    ap.add_argument("--keep", help="write the GGUFs here instead of a temporary folder")
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker)
    sys.path.insert(0, str(ROOT))
    from tests.formats.test_export_gguf_hf import CASES, REFUSED

    cases = {k: (v[0], [], None) for k, v in {**CASES, **REFUSED}.items()}
    cases.update(vocab_cases(pathlib.Path(a.shared)))
    names = [c for c in a.cases.split(",") if c] or list(cases)
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(a.keep or tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        for name in names:
            r = run_case(name, *cases[name][:1], tmp, a.llamacpp_python, *cases[name][1:])
            results.append(r)
            print(json.dumps(r), flush=True)
    ok = [r for r in results if r.get("pass")]
    print(json.dumps({"passed": len(ok), "refused": sum("refused" in r for r in results), "cases": len(results),
                      "load_avg": list(os.getloadavg())}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
