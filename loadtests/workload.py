"""Seeded workloads: every scenario is a list of RequestSpec drawn from one numpy Generator.

Same scenario + seed + sizes -> the same workload, byte for byte (prompts, lengths, arrivals).
No I/O here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

SCENARIOS = ("steady", "poisson", "burst", "shared-prefix", "cancel-storm", "long-context", "mixed-sampling")

# Words to build prompts from: plain ASCII, so every tokenizer handles them.
WORDS = (
    "the model server token cache batch prefix stream request reply queue block page kernel "
    "python function return value list dict loop class import module error test data file path "
    "number string print while if else for in and or not with as def self yield lambda async await"
).split()

JSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 16}},
                "required": ["city"],
            },
        },
    }
]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    index: int
    prompt: str
    max_tokens: int
    arrival_s: float  # offset from the start of the run (open-loop scenarios); 0 for closed-loop
    kind: str = "greedy"  # greedy | temperature | json_schema | tools
    cancel_after_tokens: int | None = None  # cancel-storm: cut the stream after this many chunks
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    scenario: str
    num_requests: int = 32
    seed: int = 0
    rate: float = 4.0  # poisson: requests per second
    prompt_words: tuple[int, int] = (8, 64)  # min, max words per prompt
    output_tokens: tuple[int, int] = (8, 64)
    shared_prefix_words: int = 400
    context_words: int = 600  # long-context: about this many words per prompt
    cancel_share: float = 0.5
    ignore_eos: bool = False  # fixed output lengths: every request generates exactly its max_tokens


def _text(rng: np.random.Generator, n_words: int) -> str:
    idx = rng.integers(0, len(WORDS), size=max(1, n_words))
    return " ".join(WORDS[i] for i in idx)


def build_workload(cfg: WorkloadConfig) -> list[RequestSpec]:
    """The scenario's requests, in arrival order. Raises ValueError for an unknown scenario."""
    if cfg.scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {cfg.scenario!r}; choose one of {', '.join(SCENARIOS)}")
    rng = np.random.default_rng(cfg.seed)
    n = cfg.num_requests
    lo, hi = cfg.prompt_words
    olo, ohi = cfg.output_tokens
    prompt_len = rng.integers(lo, hi + 1, size=n)
    out_len = rng.integers(olo, ohi + 1, size=n)
    arrivals = np.zeros(n)
    if cfg.scenario == "poisson":
        arrivals = np.cumsum(rng.exponential(1.0 / cfg.rate, size=n))
    prefix = _text(rng, cfg.shared_prefix_words) if cfg.scenario == "shared-prefix" else ""
    kinds = ("greedy", "temperature", "json_schema", "tools")
    specs = []
    for i in range(n):
        if cfg.scenario == "long-context":
            prompt = _text(rng, cfg.context_words + int(rng.integers(0, 16)))
        else:
            prompt = _text(rng, int(prompt_len[i]))
        if prefix:
            prompt = prefix + "\n\n" + prompt
        kind = kinds[int(rng.integers(0, len(kinds)))] if cfg.scenario == "mixed-sampling" else "greedy"
        cancel = None
        if cfg.scenario == "cancel-storm" and rng.random() < cfg.cancel_share:
            # Early in the stream (first quarter), so the server is still generating when the client leaves.
            cancel = int(rng.integers(1, max(2, int(out_len[i]) // 4 + 1)))
        specs.append(
            RequestSpec(
                index=i,
                prompt=prompt,
                max_tokens=int(out_len[i]),
                arrival_s=float(arrivals[i]),
                kind=kind,
                cancel_after_tokens=cancel,
                extra={"seed": int(rng.integers(0, 2**31 - 1)), **({"ignore_eos": True} if cfg.ignore_eos else {})},
            )
        )
    return specs
