"""Unpack a .modelc written from tools/train_default_model.py back into a Hugging Face folder.

The training folder of the bundled model (0.1) was not kept; its weights live on in
modelc/data/default.modelc (f16 matrices, f32 embedding and norms). This writes them as float32
safetensors with the tokenizer and config, so training can continue from them
(`train_default_model.py --init-from FOLDER`). Needs modelc (run with modelc's venv).

    python tools/default_model_unpack.py modelc/data/default.modelc /work/dm-train/base
"""

from __future__ import annotations

import json
import pathlib
import sys

from safetensors.numpy import save_file

from modelc.artifact import open_artifact
from modelc.artifact.quantize import to_f32


def main() -> None:
    src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    art = open_artifact(src, verify=True)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: to_f32(t).copy() for name, t in art.tensors.items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "tokenizer.json").write_text(art.tokenizer_json, encoding="utf-8")
    cfg = {k: v for k, v in art.config.items() if k != "rope_neox"}
    cfg["architectures"] = ["LlamaForCausalLM"]
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    print(f"{len(tensors)} tensors from {src} -> {out}")


if __name__ == "__main__":
    main()
