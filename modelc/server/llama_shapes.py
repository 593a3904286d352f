"""llama.cpp's native request and response shapes, shared by /completion and /infill.

Requests: llama.cpp's sampling names -> modelc's (sampling_body), its logit_bias forms, its defaults.
Answers: the final object of a completion ({"content", "stop", "tokens_predicted", "stop_type",
"timings", ...}), the per-token frames of a stream, and completion_probabilities (n_probs).
"""

from __future__ import annotations

import time
from typing import Any

from modelc.errors import ModelcError
from modelc.server.chat_run import matched_stop
from modelc.server.errors import error_body
from modelc.server.generation import ChoiceResult
from modelc.server.handling import RequestRecord
from modelc.server.openai_format import chat_logprob_entries
from modelc.server.schema import bad
from modelc.server.served import ServedModel
from modelc.server.sse import sse_event

# llama.cpp's sampling names -> modelc's (the rest are shared: temperature, top_k, top_p, min_p, seed, stop...).
RENAMES = {"n_predict": "max_tokens", "repeat_penalty": "repetition_penalty"}
PASSED = (
    "max_tokens",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "seed",
    "stop",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "ignore_eos",
    "min_tokens",
    "grammar",
    "json_schema",
)
# llama-server's own defaults (tools/server/README.md), for /completion fields neither the request nor the
# operator (`modelc run --temperature ...`) sets.
LLAMA_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}


def sampling_body(body: dict[str, Any]) -> dict[str, Any]:
    """The request's llama.cpp fields under modelc's names (parse_sampling's input)."""
    out: dict[str, Any] = {}
    for k, v in body.items():
        name = RENAMES.get(k, k)
        if name in PASSED and v is not None:
            out[name] = v
    # llama-server's grammar is GBNF (a string is a regex on modelc's own routes)
    if isinstance(out.get("grammar"), str):
        out["grammar"] = {"type": "gbnf", "grammar": out["grammar"]}
    if isinstance(out.get("max_tokens"), int) and out["max_tokens"] < 0:
        del out["max_tokens"]  # llama.cpp's -1 = "until the end": the server's default limit here
    if isinstance(out.get("seed"), int) and not isinstance(out["seed"], bool) and out["seed"] < 0:
        del out["seed"]  # llama.cpp's -1 (its default): a random seed
    t = out.get("temperature")
    if isinstance(t, int | float) and not isinstance(t, bool) and t < 0:
        out["temperature"] = 0.0  # llama.cpp: below 0 samples greedily (n_probs still reports probabilities)
    return out


def logit_bias(v: Any, encode: Any) -> dict[str, float]:
    """llama.cpp's logit_bias as modelc's {token id: bias}: [[id, bias]], [[text, bias]] (every token of the
    text) or an object of either; `false` for a bias bans the token (-100, the lowest bias)."""
    if isinstance(v, dict):
        pairs = list(v.items())
    elif isinstance(v, list):
        if not all(isinstance(p, list) and len(p) == 2 for p in v):
            raise bad("logit_bias", "must be [[token id or text, bias or false], ...] or an object")
        pairs = [tuple(p) for p in v]
    else:
        raise bad("logit_bias", "must be [[token id or text, bias or false], ...] or an object")
    out: dict[str, float] = {}
    for key, bias in pairs:
        if bias is False:
            bias = -100.0
        if isinstance(bias, bool) or not isinstance(bias, int | float):
            raise bad("logit_bias", f"the bias for {key!r} must be a number or false")
        if isinstance(key, str) and not key.lstrip("-").isdigit():
            ids = encode(key)
        elif isinstance(key, int | str) and not isinstance(key, bool):
            ids = [int(key)]
        else:
            raise bad("logit_bias", f"{key!r} is neither a token id nor a text")
        for tid in ids:
            out[str(tid)] = float(bias)
    return out


def probabilities(engine: ServedModel, r: ChoiceResult, n_probs: int, start: int = 0) -> list[dict[str, Any]]:
    """completion_probabilities of the result's tokens from index `start` on: id, token, bytes, logprob and the
    n_probs top_logprobs of each (chat completions' logprob entries with ids)."""
    return chat_logprob_entries(engine.tokenizer, r, start, num_top=n_probs, with_ids=True)


def token_frame(text: str, token_id: int, r: ChoiceResult, prompt_n: int) -> dict[str, Any]:
    """A stream's frame for one generated token (the result holds every token so far)."""
    return {
        "index": 0,
        "content": text,
        "tokens": [token_id],
        "stop": False,
        "id_slot": 0,
        "tokens_predicted": len(r.token_ids),
        "tokens_evaluated": prompt_n,
    }


def error_frames(e: ModelcError) -> tuple[bytes, ...]:
    """How a llama.cpp stream ends on an error after its first frame: one data: object with the error body."""
    return (sse_event(error_body(e)),)


def final_object(
    *,
    model: str,
    prompt_ids: tuple[int, ...],
    prompt_text: str,
    stops: tuple[str, ...],
    engine: ServedModel,
    r: ChoiceResult,
    rec: RequestRecord,
    content: str,
    tokens: list[int],
    index: int = 0,
) -> dict[str, Any]:
    """llama.cpp's last object of a completion (the whole answer, or a stream's final frame)."""
    word = matched_stop(engine.tokenizer, r, stops)
    stop_type = "limit" if r.finish_reason == "length" else "word" if word else "eos"
    elapsed_ms = (time.monotonic() - rec.start) * 1e3
    ttft_ms = (rec.ttft_s or 0.0) * 1e3
    predicted_ms = max(elapsed_ms - ttft_ms, 1e-6)
    return {
        "index": index,
        "content": content,
        "tokens": tokens,
        "id_slot": 0,
        "stop": True,
        "model": model,
        "tokens_predicted": len(r.token_ids),
        "tokens_evaluated": len(prompt_ids),
        "tokens_cached": r.cached_tokens,
        "prompt": prompt_text,
        "has_new_line": "\n" in r.text,
        "truncated": False,
        "stop_type": stop_type,
        "stopping_word": word or "",
        "timings": {
            "prompt_n": len(prompt_ids) - r.cached_tokens,
            "prompt_ms": ttft_ms,
            "predicted_n": len(r.token_ids),
            "predicted_ms": predicted_ms,
            "predicted_per_second": len(r.token_ids) / predicted_ms * 1e3,
        },
    }
