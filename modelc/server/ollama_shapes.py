"""Ollama's JSON shapes: options -> SamplingParams, `format` -> Constraint, durations (ns), RFC 3339
times, model `details`, digests. Pure: no HTTP, no awaits.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from modelc.artifact.reader import read_header_only
from modelc.errors import InvalidRequestError, ModelcError
from modelc.request import Constraint
from modelc.server.bounds import BOUNDS
from modelc.server.schema import parse_sampling
from modelc.server.state import GenerationDefaults

# Ollama's own sampling defaults, used when neither the request nor `modelc run --temperature ...` set one.
OLLAMA_DEFAULTS = {"temperature": 0.8, "top_p": 0.9, "top_k": 40}
DEFAULT_NUM_PREDICT = 2048  # num_predict -1 ("until the context is full") is capped here
NEVER = "9999-12-31T23:59:59Z"  # expires_at of a model that never unloads
# Ollama option name -> the OpenAI-style field parse_sampling reads.
OPTION_FIELDS = {
    "num_predict": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "repeat_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    "stop": "stop",
    "num_keep": "n_keep",
    "num_ctx": "max_context",  # Ollama sizes the context at load; here it caps the request's (<= the model's)
}


def iso_time(t: float | None) -> str:
    """Unix time -> RFC 3339 in UTC ("2026-01-02T03:04:05.123456Z"); None -> the far future."""
    if t is None:
        return NEVER
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def ns(seconds: float) -> int:
    """Ollama reports durations in nanoseconds."""
    return max(0, int(seconds * 1e9))


def sampling_params(options: Any, defaults: GenerationDefaults, vocab_size: int | None) -> Any:
    """Ollama `options` -> SamplingParams (unknown options such as mirostat are accepted and ignored)."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise InvalidRequestError("'options' must be an object", param="options")
    body: dict[str, Any] = {}
    for key, field_name in OPTION_FIELDS.items():
        if key in options and options[key] is not None:
            body[field_name] = options[key]
    for key, value in OLLAMA_DEFAULTS.items():
        if key not in body and getattr(defaults, key, None) is None:
            body[key] = value
    n = body.get("max_tokens")
    if n is not None and BOUNDS["num_predict"].check("options.num_predict", n) <= 0:
        body.pop("max_tokens")  # -1 infinite, -2 fill the context; 0 as -1 (Ollama's runner counts only > 0)
    if "max_tokens" not in body and defaults.max_tokens is None:
        body["max_tokens"] = DEFAULT_NUM_PREDICT
    if isinstance(body.get("stop"), str):
        body["stop"] = [body["stop"]]
    # Ollama shifts a full context and truncates a too-long prompt by default (its `shift`/`truncate`)
    body.setdefault("context_shift", True)
    body.setdefault("truncate", True)
    try:
        return parse_sampling(body, defaults, vocab_size=vocab_size)
    except ModelcError as e:
        option = {v: k for k, v in OPTION_FIELDS.items()}.get(e.param or "", e.param or "options")
        message = e.message.replace(f"'{e.param}'", f"'options.{option}'") if e.param else e.message
        raise InvalidRequestError(message, param=f"options.{option}") from None


def format_constraint(fmt: Any) -> Constraint | None:
    """`format`: "json" (any JSON object) or a JSON schema object; "" / None = free text."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return Constraint("json_object")
    if isinstance(fmt, dict):
        return Constraint("json_schema", json.dumps(fmt))
    raise InvalidRequestError("'format' must be \"json\" or a JSON schema object", param="format")


def parameter_size(n: int) -> str:
    """Ollama's style: "8.0B", "137.0M", "64.1K"."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def quantization_level(dtype_summary: str) -> str:
    """The dominant stored dtype from store.dtype_summary ("Q4_0 62%, F32 38%" -> "Q4_0")."""
    return (dtype_summary or "-").split(" ", 1)[0].split(",", 1)[0]


def details(architecture: str, num_params: int, dtype_summary: str) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "modelc",
        "family": architecture,
        "families": [architecture] if architecture else None,
        "parameter_size": parameter_size(num_params),
        "quantization_level": quantization_level(dtype_summary),
    }


def header_details(art: Any) -> dict[str, Any]:
    """details from an Artifact (header only is enough)."""
    from modelc.store import dtype_summary

    return details(art.architecture, art.num_params, dtype_summary(art.entries.values()))


def digest(path: Path) -> str:
    """sha256 of the artifact's header (which lists every tensor's sha256): cheap, content-addressed."""
    st = path.stat()
    return _digest(os.fspath(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=256)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    art = read_header_only(path)
    return hashlib.sha256(json.dumps(art.header, sort_keys=True).encode()).hexdigest()


def model_info(architecture: str, config: dict[str, Any], num_params: int) -> dict[str, Any]:
    """/api/show's model_info in GGUF key style."""
    a = architecture or "unknown"
    info: dict[str, Any] = {"general.architecture": a, "general.parameter_count": num_params}
    for key, name in (
        ("max_position_embeddings", "context_length"),
        ("hidden_size", "embedding_length"),
        ("num_hidden_layers", "block_count"),
        ("intermediate_size", "feed_forward_length"),
        ("num_attention_heads", "attention.head_count"),
        ("num_key_value_heads", "attention.head_count_kv"),
        ("rope_theta", "rope.freq_base"),
        ("vocab_size", "vocab_size"),
    ):
        if config.get(key) is not None:
            info[f"{a}.{name}"] = config[key]
    return info
