"""A model's own load options (`/api/load` `options`, `modelc load --kv-cache-dtype/--ray ...`) ->
its EngineConfig. Only options that change how the engine is built live here; sampling options
stay per request.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from modelc.config import EngineConfig, ReplicaConfig, parse_kv_dtype
from modelc.errors import InvalidRequestError

SCALE_OUT_KEYS = ("ray", "replicas", "cpus_per_replica", "routing")


def engine_config_for(base: EngineConfig | None, body: dict[str, Any]) -> EngineConfig | None:
    """The daemon's config with a load request's options applied; None when they change nothing.
    options.kv_cache_dtype (or a top-level kv_cache_dtype) and the scale-out keys are read."""
    options = body.get("options")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise InvalidRequestError("'options' must be an object", param="options")
    kv_dtype = _kv_dtype(options.get("kv_cache_dtype", body.get("kv_cache_dtype")))
    scale_out = _replicas(options) if any(k in options for k in SCALE_OUT_KEYS) else None
    if kv_dtype is None and scale_out is None:
        return None
    cfg = base or EngineConfig()
    if kv_dtype is not None:
        cfg = replace(cfg, cache=replace(cfg.cache, kv_dtype=kv_dtype))
    if scale_out is not None:
        cfg = replace(cfg, replicas=scale_out)
    return cfg


def _kv_dtype(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError(
            "kv_cache_dtype must be a string (auto, f32, f16, q8_0, mixed)", param="kv_cache_dtype"
        )
    return parse_kv_dtype(value)


def _replicas(options: dict[str, Any]) -> ReplicaConfig:
    ray = options.get("ray", "local")
    if not isinstance(ray, str) or not ray:
        raise InvalidRequestError("options.ray must be 'local', 'auto' or HOST:PORT", param="options.ray")
    try:
        return ReplicaConfig(
            replicas=_number(options, "replicas", 2, int),
            cpus_per_replica=_number(options, "cpus_per_replica", 1.0, float),
            address=None if ray == "local" else ray,
            policy=str(options.get("routing", "affinity")),
        )
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"options.{exc.param}: {exc}", param=f"options.{exc.param}") from None


def _number(options: dict, key: str, default: Any, kind: type) -> Any:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and value != int(value)):
        raise InvalidRequestError(f"options.{key} must be a number", param=f"options.{key}")
    return kind(value)
