"""Request body bytes -> a checked JSON object: valid UTF-8 JSON, an object at the top, nested at most
MAX_DEPTH deep, at most MAX_VALUES values, no lone UTF-16 surrogates in any string. Pure and
synchronous: the caller decides whether to run it in a worker thread (large bodies) so the event loop
never parses megabytes.

Parsing holds the GIL for its whole length even in a worker thread, and its cost grows with the
number of values far more than with bytes: 10 MB of one string parses in ~10-70 ms, 7.5 MB of small
integers (2.5M values) in ~250 ms, during which /health waits. So before parsing, a body's values are
counted by their separators (`,` `[` `{`: three bytes.count calls, a few ms for 16 MB, each letting the
loop run between them) and a body with more than MAX_VALUES is a 413. No route needs that many:
OpenAI caps an embeddings request at 300k tokens; separators inside strings count too, but prose has
a comma every ~50-100 characters, so text reaches the bound only beyond the body limit (8 MiB default).
"""

from __future__ import annotations

import json
import re
from typing import Any

from modelc.errors import InvalidRequestError, PayloadTooLargeError

MAX_DEPTH = 64  # no request field needs more; deeper bodies would only reach recursion limits later
MAX_VALUES = 1 << 19  # JSON values per body (counted by separators): ~10-40 ms of parsing at most
OFFLOAD_BYTES = 64 * 1024  # bodies larger than this are parsed in a worker thread
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_body(raw: bytes, *, array: bool = False) -> Any:
    """The checked JSON object of a request body (or, with `array`, a JSON array too: llama.cpp's
    POST /lora-adapters sends one)."""
    if not raw:
        raise InvalidRequestError("request body is empty: send a JSON object")
    check_num_values(raw)
    try:
        body = json.loads(raw, parse_constant=_not_json)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidRequestError(f"request body is not valid JSON: {e}") from None
    except RecursionError:
        raise InvalidRequestError(f"request body is nested too deeply (at most {MAX_DEPTH} levels)") from None
    if not isinstance(body, dict) and not (array and isinstance(body, list)):
        raise InvalidRequestError("request body must be a JSON " + ("array" if array else "object"))
    check_structure(body, surrogates=_SURROGATE_ESCAPE.search(raw) is not None)
    return body


def check_num_values(raw: bytes) -> None:
    """413 for a body of more than MAX_VALUES values; a body of n bytes holds at most n / 2 + 1."""
    if len(raw) <= 2 * MAX_VALUES:
        return
    n = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
    if n > MAX_VALUES:
        raise PayloadTooLargeError(
            f"request body holds about {n} JSON values (counted by their separators); at most {MAX_VALUES} are "
            "accepted: send fewer inputs or token ids per request"
        )


def _not_json(name: str) -> Any:
    # Python's json reads NaN and Infinity; JSON has neither, and no request field may hold one.
    raise InvalidRequestError(f"request body is not valid JSON: {name} is not a JSON value")


def check_structure(value: Any, *, surrogates: bool = True) -> None:
    """Iteratively (no recursion): depth <= MAX_DEPTH and, when `surrogates`, every string (keys too)
    is valid Unicode. Only escapes can put a lone surrogate in parsed JSON, so parse_body looks only
    when the raw bytes hold one."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            if depth > MAX_DEPTH:
                raise _too_deep()
            for k, item in v.items():
                if surrogates:
                    _check_text(k)
                if isinstance(item, dict | list):
                    stack.append((item, depth + 1))
                elif surrogates and isinstance(item, str):
                    _check_text(item)
        elif isinstance(v, list):
            if depth > MAX_DEPTH:
                raise _too_deep()
            for item in v:
                if isinstance(item, dict | list):
                    stack.append((item, depth + 1))
                elif surrogates and isinstance(item, str):
                    _check_text(item)


def _too_deep() -> InvalidRequestError:
    return InvalidRequestError(f"request body is nested too deeply (at most {MAX_DEPTH} levels)")


def _check_text(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError(
            "request body holds a lone UTF-16 surrogate escape (such as \\ud800) in a string: not valid Unicode"
        ) from None
