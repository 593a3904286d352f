"""API-key check (constant-time compare): a bearer token or x-api-key. Probe and metrics routes are exempt."""

from __future__ import annotations

import hmac
from typing import Any

from modelc.errors import AuthError

EXEMPT_PATHS = frozenset({"/health", "/info", "/props", "/metrics"})


def check_key(headers: Any, api_key: str) -> None:
    """`Authorization: Bearer KEY`, or `x-api-key: KEY` (what the Anthropic SDK sends) when there is
    no Authorization header."""
    alt = headers.get("x-api-key")
    if alt and not headers.get("Authorization"):
        if not hmac.compare_digest(alt.strip().encode(), api_key.encode()):
            raise AuthError("incorrect API key provided")
        return
    check_bearer(headers.get("Authorization"), api_key)


def check_bearer(authorization: str | None, api_key: str) -> None:
    """Raise AuthError unless `authorization` is `Bearer <api_key>`."""
    if not authorization:
        raise AuthError("missing Authorization header: send 'Authorization: Bearer <api key>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("malformed Authorization header: expected 'Bearer <api key>'")
    if not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise AuthError("incorrect API key provided")
