"""Request body bytes -> a checked JSON object: valid UTF-8 JSON, an object at the top, nested at most
MAX_DEPTH deep, no lone UTF-16 surrogates in any string. Pure and synchronous: the caller decides
whether to run it in a worker thread (large bodies) so the event loop never parses megabytes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from modelc.errors import InvalidRequestError

MAX_DEPTH = 64  # no request field needs more; deeper bodies would only reach recursion limits later
OFFLOAD_BYTES = 64 * 1024  # bodies larger than this are parsed in a worker thread
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_body(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise InvalidRequestError("request body is empty: send a JSON object")
    try:
        body = json.loads(raw, parse_constant=_not_json)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidRequestError(f"request body is not valid JSON: {e}") from None
    except RecursionError:
        raise InvalidRequestError(f"request body is nested too deeply (at most {MAX_DEPTH} levels)") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    check_structure(body, surrogates=_SURROGATE_ESCAPE.search(raw) is not None)
    return body


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
