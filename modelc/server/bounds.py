"""The bounds of every numeric request parameter, in one table.

Both sides are made from it: the request parsing (server/schema.py reads a field with
`bounded_int` / `bounded_float`, which refuse what the table refuses with a 400 naming the field)
and the OpenAPI document (server/openapi.py, openapi_surfaces.py and the Ollama entries take
`BOUNDS[name].schema()`), so /openapi.json declares every bound the server enforces and a
schema-valid value is never refused for its range. tests/server/test_bounds.py checks both sides.

A bound here is what the server enforces for every model; what depends on the served model (a
token id beyond its vocabulary, a prompt beyond its context) is not a schema bound.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from modelc.errors import InvalidRequestError

MAX_N = 20  # choices per request (n, best_of)
MAX_TOP_LOGPROBS = 20
MAX_STOP = 16  # stop strings per request
MAX_STOP_CHARS = 4096  # per stop string: longer ones cost matching time and never occur in real output
MAX_SEED = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Bound:
    """An integer or a finite number with optional limits (`lo_open`: the minimum itself is refused)."""

    kind: str  # "integer" | "number"
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    description: str | None = None

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.kind}
        if self.lo is not None:
            out["exclusiveMinimum" if self.lo_open else "minimum"] = self.lo
        if self.hi is not None:
            out["maximum"] = self.hi
        if self.description:
            out["description"] = self.description
        return out

    def check(self, name: str, v: Any) -> int | float:
        """v as this bound's type, or a 400 naming `name`."""
        if self.kind == "integer":
            if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and not v.is_integer()):
                raise bad(name, f"must be an integer, got {json.dumps(v)[:40]}")
            v = int(v)
        else:
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise bad(name, f"must be a finite number, got {json.dumps(v)[:40]}")
            v = float(v)
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            raise bad(name, f"must be {'>' if self.lo_open else '>='} {_num(self.lo)}, got {v}")
        if self.hi is not None and v > self.hi:
            raise bad(name, f"must be <= {_num(self.hi)}, got {v}")
        return v


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**53 else str(x)


def bad(param: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(f"'{param}' {why}", param=param)


def I(lo: float | None = None, hi: float | None = None, description: str | None = None) -> Bound:  # noqa: E743
    return Bound("integer", lo, hi, description=description)


def N(
    lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, description: str | None = None
) -> Bound:
    return Bound("number", lo, hi, lo_open, description)


BOUNDS: dict[str, Bound] = {
    # sampling (server/schema.parse_sampling; modelc.request.SamplingParams checks the same ranges)
    "max_tokens": I(0),
    "max_completion_tokens": I(0, description="wins over max_tokens"),
    "openai_max_tokens": I(1),  # /v1/chat/completions and /v1/completions: OpenAI and vLLM refuse 0
    "temperature": N(0, 100),
    "top_p": N(0, 1, lo_open=True, description="nucleus sampling; 1 = off"),
    "top_p_native": N(0, 1, description="nucleus sampling; 0 or 1 = off"),
    "top_k": I(-1, description="0 or -1 = off"),
    "min_p": N(0, 1),
    "typical_p": N(0, 1, description="0 or 1 = off"),
    "repetition_penalty": N(0, lo_open=True),
    "presence_penalty": N(-2, 2),
    "frequency_penalty": N(-2, 2),
    "logit_bias_value": N(-100, 100),
    "seed": I(-(2**63), MAX_SEED),
    "min_tokens": I(0),
    "gamma": I(0, 32, description="speculative tokens per step"),
    "n_keep": I(-1, description="prompt tokens kept when the context shifts; -1 = all"),
    "max_context": I(2, description="caps this request's context (<= the model's)"),
    "top_logprobs": I(0, MAX_TOP_LOGPROBS),
    "logprobs_count": I(0, MAX_TOP_LOGPROBS),  # legacy completions: `logprobs` is a number of alternatives
    "n": I(1, MAX_N),
    "best_of": I(1, MAX_N),
    # the Anthropic Messages API's own ranges (docs.anthropic.com, "Messages")
    "anthropic_max_tokens": I(1),
    "anthropic_temperature": N(0, 1),
    "anthropic_top_k": I(0),
    "budget_tokens": I(1024, description="thinking tokens; Anthropic's minimum is 1024, less than max_tokens"),
    # the OpenAI Responses API's own ranges (platform.openai.com/docs/api-reference/responses)
    "max_output_tokens": I(16, description="OpenAI's minimum is 16"),
    "responses_n": I(1, 1, description="a response has one output"),
    # other routes
    "dimensions": I(1, description="keep the first N features (renormalized)"),
    "top_n": I(1),
    "input_items_limit": I(1, 100, description="items per page (OpenAI's 1..100)"),
    "max_tokens_per_doc": I(1, description="each document cut to this many tokens"),
    "num_predict": I(-2, description="tokens to generate; -1 = no limit, -2 = fill the context"),
}


def bounded_int(body: dict, name: str, default: int | None, bound: str | None = None) -> int | None:
    """The integer field `name` checked against BOUNDS[bound or name]; `default` when absent or null."""
    v = body.get(name)
    return default if v is None else int(BOUNDS[bound or name].check(name, v))


def bounded_float(body: dict, name: str, default: float | None, bound: str | None = None) -> float | None:
    v = body.get(name)
    return default if v is None else float(BOUNDS[bound or name].check(name, v))


def query_int(args: Any, name: str, default: int, bound: str | None = None) -> int:
    """An integer query parameter (a string in the URL) checked against BOUNDS[bound or name]."""
    raw = args.get(name)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise bad(name, f"must be an integer, got {raw[:40]!r}") from None
    return int(BOUNDS[bound or name].check(name, v))


def schema_of(name: str, bound: str | None = None, **extra: Any) -> dict[str, Any]:
    """The OpenAPI schema of one bounded field (extra keys, such as a description, added)."""
    return {**BOUNDS[bound or name].schema(), **extra}
