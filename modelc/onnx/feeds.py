"""Input validation for an ONNX plan: user values -> arrays of the declared dtype and shape.

Bad input (missing or unknown name, wrong rank or dimension, inconsistent symbolic dims,
ragged lists, NaN/inf) raises InvalidRequestError saying why. Pure; no execution here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelc.errors import InvalidRequestError
from modelc.ir import DataType


def declared_dtype(spec: dict[str, Any]) -> np.dtype:
    name = spec.get("dtype")
    if name is None:
        return np.dtype(np.float32)
    dt = DataType.parse(name)
    return np.dtype(np.float32) if dt is DataType.BF16 else dt.numpy_dtype


def to_array(value: Any, spec: dict[str, Any]) -> np.ndarray:
    """One input value (nested lists or an array) as an array of the declared dtype."""
    name = spec["name"]
    want = declared_dtype(spec)
    try:
        raw = np.asarray(value)
    except ValueError:
        raise InvalidRequestError(
            f"input {name!r} is a ragged list; it must be a rectangular array", param=name
        ) from None
    if raw.dtype == object or raw.dtype.kind in "USV":
        raise InvalidRequestError(f"input {name!r} must hold numbers", param=name)
    if want.kind in "iub" and raw.dtype.kind == "f":
        if not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw)):
            raise InvalidRequestError(f"input {name!r} must hold integers", param=name)
    if raw.dtype.kind in "fc" and not np.all(np.isfinite(raw)):
        raise InvalidRequestError(f"input {name!r} contains NaN or infinity", param=name)
    return np.ascontiguousarray(raw, dtype=want)


def check_shapes(arrays: dict[str, np.ndarray], specs: list[dict[str, Any]]) -> None:
    """Each array against its declared shape; a symbolic dim must have one value across inputs."""
    bound: dict[str, tuple[int, str]] = {}
    for spec in specs:
        name, shape = spec["name"], spec.get("shape")
        if shape is None:
            continue
        x = arrays[name]
        if x.ndim != len(shape):
            raise InvalidRequestError(
                f"input {name!r} must have shape {_show(shape)}, got shape {list(x.shape)}", param=name
            )
        for i, (d, n) in enumerate(zip(shape, x.shape, strict=True)):
            if isinstance(d, int) and d > 0 and n != d:
                raise InvalidRequestError(
                    f"input {name!r} must have shape {_show(shape)}, got shape {list(x.shape)} (dimension {i})",
                    param=name,
                )
            if isinstance(d, str) and d:
                seen = bound.setdefault(d, (n, name))
                if seen[0] != n:
                    raise InvalidRequestError(
                        f"dimension {d!r} is {seen[0]} in input {seen[1]!r} but {n} in input {name!r}", param=name
                    )


def validate(feeds: dict[str, Any], specs: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """All declared inputs present, none unknown; each converted and shape-checked."""
    names = [s["name"] for s in specs]
    unknown = sorted(set(feeds) - set(names))
    if unknown:
        raise InvalidRequestError(f"unknown input {unknown[0]!r}; the model's inputs are {names}", param=unknown[0])
    missing = [n for n in names if n not in feeds]
    if missing:
        raise InvalidRequestError(f"missing input {missing[0]!r}; the model's inputs are {names}", param=missing[0])
    arrays = {s["name"]: to_array(feeds[s["name"]], s) for s in specs}
    check_shapes(arrays, specs)
    return arrays


def _show(shape: list[Any]) -> str:
    return "[" + ", ".join("?" if d is None or d == "" else str(d) for d in shape) + "]"
