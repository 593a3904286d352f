"""Bearer-token check (constant-time compare). Probe and metrics routes are exempt."""

from __future__ import annotations

import hmac

from modelc.errors import AuthError

EXEMPT_PATHS = frozenset({"/health", "/info", "/props", "/metrics"})


def check_bearer(authorization: str | None, api_key: str) -> None:
    """Raise AuthError unless `authorization` is `Bearer <api_key>`."""
    if not authorization:
        raise AuthError("missing Authorization header: send 'Authorization: Bearer <api key>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("malformed Authorization header: expected 'Bearer <api key>'")
    if not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise AuthError("incorrect API key provided")
