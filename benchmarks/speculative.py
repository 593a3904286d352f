"""Speculative decoding on the bundled model (modelc/data/default.modelc): decode speed with and
without it, through AsyncEngine (the actors, scheduler and runner a server uses).

    .venv/bin/python benchmarks/speculative.py [--tokens 192] [--runs 3] [--gamma 8] [--streams 8]
        [--threads 2] [--cases plain,lookup,draft-self,draft-random,draft-random-1layer] [--json]

Workload "code edit": a Python file followed by an instruction to repeat it with a small change and
the start of the copy, so most of the output repeats the input (what prompt lookup is for). Greedy,
ignore_eos, exactly --tokens tokens per stream. Cases:
- plain: no speculation;
- lookup: prompt lookup (n-gram drafts), gamma up to --gamma;
- draft-self: the target as its own draft (every draft accepted: the ceiling of a draft model);
- draft-random: a draft with the target's shapes and tokenizer and random weights (nothing accepted:
  what adaptive gamma's back-off leaves of the cost of a useless draft as large as the target);
- draft-random-1layer: the same with only the first layer (a draft smaller than its target).
One stream: decode tokens/s after the first token (median of --runs). --streams concurrent streams
(each its own variation of the file): aggregate tokens/s over the wall time. Every greedy output is
compared with the plain one token for token. The runs of the cases alternate (the VM is shared).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import anyio
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = ROOT / "modelc" / "data" / "default.modelc"

CODE = '''import json
import os


class Inventory:
    """A small in-memory inventory with JSON persistence."""

    def __init__(self, path):
        self.path = path
        self.items = {}

    def add(self, name, count=1):
        if count <= 0:
            raise ValueError("count must be positive")
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count=1):
        have = self.items.get(name, 0)
        if count > have:
            raise KeyError(name)
        self.items[name] = have - count
        if self.items[name] == 0:
            del self.items[name]

    def total(self):
        return sum(self.items.values())

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(self.items, fh, indent=2, sort_keys=True)
        os.replace(tmp, self.path)

    def load(self):
        if os.path.exists(self.path):
            with open(self.path) as fh:
                self.items = json.load(fh)
'''


def code_edit_prompt(variant: int) -> str:
    code = CODE.replace("Inventory", f"Inventory{variant}" if variant else "Inventory")
    return f"{code}\n\n# The same module again, unchanged except for a docstring on every method:\n\nimport json\n"


def random_draft(source, layers: int | None = None):
    """The target's architecture, shapes and tokenizer with random weights (a useless draft);
    `layers`: keep only the first ones (a smaller draft, as drafts usually are)."""
    from modelc.ir import DataType, Model, TensorData

    rng = np.random.default_rng(0)
    tensors = {}
    config = dict(source.config)
    if layers is not None:
        config["num_hidden_layers"] = layers
    for name, t in source.tensors.items():
        if layers is not None and any(f"layers.{i}." in name for i in range(layers, 1000)):
            continue
        if len(t.shape) < 2:
            tensors[name] = t  # norms stay: keeps activations in range
            continue
        dtype = np.float16 if t.dtype is DataType.F16 else np.float32
        data = (rng.standard_normal(t.shape) * 0.05).astype(dtype)
        tensors[name] = TensorData(t.shape, DataType.F16 if dtype == np.float16 else DataType.F32, data.reshape(-1))
    return Model(
        name="random-draft",
        architecture=source.architecture,
        tensors=tensors,
        config=config,
        tokenizer_json=source.tokenizer_json,
        special_tokens=dict(source.special_tokens or {}),
        naming=source.naming,
    )


def engine_config(case: str, args, draft_random):
    from modelc.config import CacheConfig, EngineConfig, SchedulerConfig

    spec = {"plain": None, "lookup": "ngram"}.get(case, "draft")
    draft = {"draft-self": str(MODEL), "draft-random": draft_random[0], "draft-random-1layer": draft_random[1]}.get(
        case
    )
    return EngineConfig(
        threads=args.threads,
        cache=CacheConfig(kv_cache_tokens=args.streams * 1024 * (2 if draft is not None else 1)),
        scheduler=SchedulerConfig(max_num_seqs=max(8, args.streams), speculative=spec, spec_gamma=args.gamma),
        draft=draft,
    )


async def run_case(case: str, args, draft_random, prompts_ids: list[list[int]]) -> dict:
    from modelc.api.async_engine import AsyncEngine
    from modelc.request import Finished, SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    out: dict = {"case": case}
    async with AsyncEngine.open(str(MODEL), engine_config(case, args, draft_random)) as eng:

        async def one(ids: list[int]) -> tuple[list[int], float, float]:
            toks, first, last = [], 0.0, 0.0
            async for ev in eng.generate(ids, params):
                if isinstance(ev, Finished):
                    break
                now = time.perf_counter()
                first = first or now
                last = now
                toks.append(ev.token_id)
            return toks, first, last

        toks, first, last = await one(prompts_ids[0])  # warm (compiles, numba cache)
        toks, first, last = await one(prompts_ids[0])
        out["single_tok_s"] = (len(toks) - 1) / (last - first)
        out["single_tokens"] = toks
        results: list = [None] * args.streams
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(args.streams):

                async def go(i: int = i) -> None:
                    results[i] = await one(prompts_ids[i])

                tg.start_soon(go)
        wall = time.perf_counter() - t0
        out["streams_tok_s"] = sum(len(r[0]) for r in results) / wall
        out["streams_tokens"] = [r[0] for r in results]
        st = eng.stats()
        drafted = st.get("spec_decode_num_draft_tokens", 0)
        out["acceptance"] = st.get("spec_decode_num_accepted_tokens", 0) / drafted if drafted else None
        out["drafted"] = drafted  # over the engine's life: the warm-up, the single stream and the streams
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=192)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gamma", type=int, default=8)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", default="plain,lookup,draft-self,draft-random,draft-random-1layer")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from modelc.artifact.reader import open_artifact
    from modelc.tokenizer.tokenizer import Tokenizer

    src = open_artifact(MODEL)
    tok = Tokenizer.from_json(src.tokenizer_json, src.special_tokens or {})
    prompts = [tok.encode(code_edit_prompt(i)) for i in range(max(1, args.streams))]
    draft_random = (random_draft(src), random_draft(src, layers=1))
    cases = args.cases.split(",")
    runs: dict[str, list[dict]] = {c: [] for c in cases}
    for _ in range(args.runs):
        for case in cases:
            runs[case].append(anyio.run(run_case, case, args, draft_random, prompts))
    base = runs.get("plain", [None])[0]
    rows = []
    for case in cases:
        r = runs[case]
        row = {
            "case": case,
            "single_tok_s": statistics.median(x["single_tok_s"] for x in r),
            "streams_tok_s": statistics.median(x["streams_tok_s"] for x in r),
            "acceptance": r[0]["acceptance"],
            "drafted": [x["drafted"] for x in r],
            "runs_single": [round(x["single_tok_s"], 1) for x in r],
            "runs_streams": [round(x["streams_tok_s"], 1) for x in r],
        }
        if base is not None:
            row["same_output_as_plain"] = all(
                x["single_tokens"] == base["single_tokens"] and x["streams_tokens"] == base["streams_tokens"] for x in r
            )
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
        return
    plain = next((x for x in rows if x["case"] == "plain"), None)
    print(f"prompt {len(prompts[0])} tokens, {args.tokens} generated, gamma {args.gamma}, {args.threads} threads")
    print(
        f"case  1 stream tok/s (x plain) [runs]  {args.streams} streams tok/s (x plain) [runs]  acceptance  drafted  same"
    )
    for x in rows:
        r1 = x["single_tok_s"] / plain["single_tok_s"] if plain else float("nan")
        r8 = x["streams_tok_s"] / plain["streams_tok_s"] if plain else float("nan")
        acc = "-" if x["acceptance"] is None else f"{x['acceptance']:.2f}"
        print(f"{x['case']:<13} {x['single_tok_s']:8.1f} ({r1:4.2f}x) {x['runs_single']}   "
              f"{x['streams_tok_s']:8.1f} ({r8:4.2f}x) {x['runs_streams']}   {acc:>6}  {x['drafted']}  "
              f"{x.get('same_output_as_plain')}")  # fmt: skip


if __name__ == "__main__":
    main()
