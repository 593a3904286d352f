"""Browser safety and control-route checks, run by the app's before_request hook on EVERY route.

No per-route list: a route added later is covered as soon as it is registered.
- Host: a loopback name (localhost, *.localhost), an IP literal, or one of --allowed-hosts ("*" = any);
  anything else is 403. This stops DNS rebinding (evil.example resolving to 127.0.0.1).
- State-changing methods (POST, PUT, PATCH, DELETE): a body must be JSON (Content-Type
  application/json, else 415), and an Origin header, when present, must be the server's own origin
  or one of --cors-origins (else 403). A web page on another origin can thus neither send a "simple"
  text/plain request nor read or change anything.
- CORS headers (and preflight answers) only for --cors-origins.
- Auth: with --api-key every route except the probes (/health, /info, /props, /metrics) needs
  `Authorization: Bearer KEY`; the daemon's control token (daemon.json) is accepted wherever the key is.
- Control routes (shutdown, load/unload, copy, delete, pull, LoRA) always need the control token or
  the API key, with or without --api-key.

Marking a control route: put `@control_route` UNDER the route decorator, e.g.

    @bp.post("/api/thing")
    @control_route
    async def thing(): ...

No awaits and no engine access here.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from modelc.errors import AuthError, ForbiddenError, ModelcError, UnsupportedMediaTypeError
from modelc.server.state import ServerConfig

F = TypeVar("F", bound=Callable[..., Any])
CONTROL_ATTR = "modelc_control"
PUBLIC_ATTR = "modelc_public"
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
CORS_HEADERS = "Authorization, Content-Type, x-api-key, anthropic-version"
CORS_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
EXEMPT_PATHS = frozenset({"/health", "/info", "/props", "/metrics"})  # the probes: no API key needed


def control_route(fn: F) -> F:
    """Mark a view as a control route (it then needs the control token or the API key)."""
    setattr(fn, CONTROL_ATTR, True)
    return fn


def is_control(view: Any) -> bool:
    return bool(getattr(view, CONTROL_ATTR, False))


def public_route(fn: F) -> F:
    """Mark a GET view that needs no API key: the web UI's page and static files (they hold no data;
    the API calls the page makes carry the key). Host and Origin checks still apply."""
    setattr(fn, PUBLIC_ATTR, True)
    return fn


def is_public(view: Any) -> bool:
    return bool(getattr(view, PUBLIC_ATTR, False))


def split_host(host: str) -> str:
    """'Host' header -> the bare lowercase name ('[::1]:8080' -> '::1', 'a.b:80' -> 'a.b')."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(host: str | None, config: ServerConfig) -> bool:
    if not host:
        return False
    name = split_host(host)
    allowed = {h.lower().rstrip(".") for h in config.allowed_hosts}
    if "*" in allowed or name in allowed or name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    return _is_ip(name)  # an IP literal cannot be rebound to another address by DNS


def origin_allowed(origin: str, host: str | None, config: ServerConfig) -> bool:
    """The server's own origin (scheme://Host) or one listed in --cors-origins ('*' = any)."""
    if origin in config.cors_origins or "*" in config.cors_origins:
        return origin != "null" or "null" in config.cors_origins
    parts = urlsplit(origin)
    return bool(host) and parts.scheme in ("http", "https") and parts.netloc.lower() == (host or "").lower()


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(token: str | None, secret: str | None) -> bool:
    return token is not None and secret is not None and hmac.compare_digest(token.encode(), secret.encode())


def check_auth(
    authorization: str | None, path: str, control: bool, config: ServerConfig, x_api_key: str | None = None
) -> None:
    """The API key / control token rules above; raises AuthError (401) or ForbiddenError (403).
    `x-api-key: KEY` (what the Anthropic SDK sends) counts when there is no Authorization header."""
    token = bearer_token(authorization)
    if not authorization and x_api_key and x_api_key.strip():
        token, authorization = x_api_key.strip(), "x-api-key"
    ok = _matches(token, config.api_key) or _matches(token, config.control_token)
    if control:
        if ok:
            return
        if config.api_key is None and config.control_token is None:
            raise ForbiddenError("control routes are disabled: this server has no API key and no control token")
        if config.api_key is None:
            raise ForbiddenError(
                "this is a control route: send the daemon's control token ('Authorization: Bearer TOKEN', "
                "as the modelc CLI does from daemon.json)"
            )
    elif config.api_key is None or path in EXEMPT_PATHS or ok:
        return
    if not authorization:
        raise AuthError("missing Authorization header: send 'Authorization: Bearer <api key>'")
    if token is None:
        raise AuthError("malformed Authorization header: expected 'Bearer <api key>'")
    raise AuthError("incorrect API key provided")


def check_request(request: Any, view: Any, config: ServerConfig) -> None:
    """Every check above for one request (Quart's `request`, the matched view function or None)."""
    host = request.headers.get("Host")
    if not host_allowed(host, config):
        raise ForbiddenError(
            "Host header not allowed: use a loopback address or start the server with --allowed-hosts NAME"
        )
    origin = request.headers.get("Origin")
    method = request.method.upper()
    if method == "OPTIONS":
        return  # a CORS preflight: answered with or without CORS headers (after_request), never run
    if method in STATE_CHANGING:
        if origin is not None and not origin_allowed(origin, host, config):
            raise ForbiddenError("cross-origin request refused: this Origin is not in the server's --cors-origins")
        sent_type = request.headers.get("Content-Type")
        if (sent_type is not None or _has_body(request)) and not _is_json(request.mimetype):
            raise UnsupportedMediaTypeError("send the body as JSON with 'Content-Type: application/json'")
    if is_public(view) and method in ("GET", "HEAD"):
        return
    headers = request.headers
    check_auth(headers.get("Authorization"), request.path, is_control(view), config, headers.get("x-api-key"))


def _has_body(request: Any) -> bool:
    length = request.content_length
    return (length is not None and length > 0) or "chunked" in request.headers.get("Transfer-Encoding", "").lower()


def _is_json(mimetype: str | None) -> bool:
    m = (mimetype or "").lower()
    return m == "application/json" or (m.startswith("application/") and m.endswith("+json"))


def add_cors(request: Any, response: Any, config: ServerConfig) -> Any:
    """CORS headers for an Origin listed in --cors-origins; nothing for any other origin."""
    origin = request.headers.get("Origin")
    if origin is None or not config.cors_origins:
        return response
    if origin not in config.cors_origins and "*" not in config.cors_origins:
        return response
    if origin == "null" and "null" not in config.cors_origins:
        return response
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers.add("Vary", "Origin")
    if request.method.upper() == "OPTIONS":
        response.headers["Access-Control-Allow-Methods"] = CORS_METHODS
        response.headers["Access-Control-Allow-Headers"] = CORS_HEADERS
        response.headers["Access-Control-Max-Age"] = "600"
    return response


def is_loopback_bind(host: str) -> bool:
    name = split_host(host) if host.startswith("[") else host.strip().lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, config: ServerConfig) -> None:
    """Refuse a non-loopback listen address without an API key, unless --insecure-no-auth."""
    if is_loopback_bind(host) or config.api_key is not None or config.insecure_no_auth:
        return
    raise ModelcError(
        f"refusing to listen on {host} without --api-key: anyone who can reach it could use and control this "
        "server; pass --api-key KEY (or MODELC_API_KEY), or --insecure-no-auth to accept that"
    )
