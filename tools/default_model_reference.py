"""Reference greedy continuations of the bundled default model, computed with torch (dev-only).

Loads the HF folder written by tools/train_default_model.py, rounds every 2-D weight except the
(tied) embedding to float16 exactly as `modelc pack --quantize f16` stores it, and writes the
greedy token ids for a few prompts (plain code, a fill-in-the-middle prompt, a chat prompt) to tests/fixtures/default_model/greedy.json, with each step's
top-2 logit margin (so a test knows the continuation is not decided by a near tie).

    /work/refvenv/bin/python tools/default_model_reference.py /work/dm-train/run/best
"""

from __future__ import annotations

import json
import pathlib
import sys

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from default_model_data import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, render_chat  # noqa: E402
from default_model_net import TinyLlama  # noqa: E402

PROMPTS = ["def fibonacci(n):\n", "import os\n", "class Stack:\n    def __init__(self):\n"]
# (prefix, suffix), laid out as modelc.server.fim does: no BOS first, as the model adds none (add_bos_token
# false; it was trained on FIM rows with and without <|endoftext|> first)
FIM = [("def add(a, b):\n    return", "\n\n\nprint(add(1, 2))\n")]
CHAT = [[{"role": "user", "content": "Return the number of lines in the file at path."}]]
STEPS = 24


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    out = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/default_model/greedy.json")
    cfg = json.loads((folder / "config.json").read_text())
    model = TinyLlama(cfg)
    state = {k.removeprefix("model."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    for k, v in state.items():
        if v.ndim == 2 and k != "embed_tokens.weight":
            state[k] = v.half().float()
    model.load_state_dict(state)
    model.eval()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    cases = []
    prompts = [(p, {}) for p in PROMPTS]
    prompts += [(f"{FIM_PREFIX}{pre}{FIM_SUFFIX}{suf}{FIM_MIDDLE}", {"fim": [pre, suf]}) for pre, suf in FIM]
    prompts += [(render_chat(m, add_generation_prompt=True), {"messages": m}) for m in CHAT]
    with torch.no_grad():
        for prompt, kind in prompts:
            ids = tok.encode(prompt).ids
            x = torch.tensor([ids])
            new, margins = [], []
            for _ in range(STEPS):
                logits = model(x)[0, -1]
                top = torch.topk(logits, 2)
                new.append(int(top.indices[0]))
                margins.append(float(top.values[0] - top.values[1]))
                x = torch.cat([x, top.indices[:1].view(1, 1)], dim=1)
            text = tok.decode(new, skip_special_tokens=False)
            cases.append(
                {"prompt": prompt, **kind, "prompt_ids": ids, "greedy_ids": new, "margins": margins, "text": text}
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"source": str(folder), "cases": cases}, indent=1))
    for c in cases:
        print(repr(c["prompt"] + c["text"]), "min margin", min(c["margins"]))


if __name__ == "__main__":
    main()
