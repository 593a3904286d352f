"""`modelc warmup [MODEL]`: compile (into numba's on-disk cache) every kernel the model's requests reach,
and write its repacked weights to their disk cache (models/r16_cache.py).

For images and CI: run it once at build time, and the first `modelc run` of that model starts warm.
"""

from __future__ import annotations

import time

import typer

from modelc.cli.console import out


def warmup_cmd(
    model: str | None = typer.Argument(
        None, help="A .modelc file, a store name or raw weights (packed first); none = the bundled default model."
    ),
    threads: int | None = typer.Option(None, "--threads", help="numba threads (the compiled kernels are the same)."),
    kv_cache_dtype: str = typer.Option(
        "auto",
        "--kv-cache-dtype",
        help="The KV cache type `modelc run` will use (its kernels): auto, f32, f16, q8_0, mixed.",
    ),
) -> None:
    """Compile ahead the kernels MODEL needs (its weight types, this CPU), so serving starts warm.

    Example: modelc warmup tiny
    """
    started = time.perf_counter()
    from modelc.api.engines import adapter_for
    from modelc.artifact.reader import open_artifact
    from modelc.cli.console import progress_bar
    from modelc.daemon.launch import serve_target

    path, name = serve_target(model, progress_bar)
    source = open_artifact(path)
    adapter = adapter_for(source)
    if adapter is not None:
        if getattr(adapter, "warmup", None) is not None:
            adapter.warmup()
    else:
        from modelc.config import parse_kv_dtype
        from modelc.engine.runner import Runner
        from modelc.engine.warm import warmup
        from modelc.models import r16_cache

        # the KV type `modelc run` takes (auto: f16 for a quantized model): its write and attention kernels
        warmup(Runner(source, num_kv_blocks=2, kv_dtype=parse_kv_dtype(kv_cache_dtype), threads=threads))
        r16_cache.flush(wait=True)
    cache = _cache_dir()
    out.print(f"warm: {name} in {time.perf_counter() - started:.1f}s (numba cache: {cache})")


def _cache_dir() -> str:
    from modelc.kernels.elementwise import norm

    try:
        return str(norm.rms_norm._cache.cache_path)
    except AttributeError:
        return "unknown"


def register(app: typer.Typer) -> None:
    app.command("warmup")(warmup_cmd)
