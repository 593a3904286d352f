"""`modelc run`: serve one model over HTTP (OpenAI + native API) until SIGINT/SIGTERM.

Thin shell: options -> ServerConfig/EngineConfig -> modelc.server.daemon.serve. ARTIFACT is a
.modelc path, a store name, or raw weights (read in memory, not packed).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import anyio
import typer

from modelc.server.state import GenerationDefaults, ServerConfig


def engine_config(
    *,
    engines: int,
    threads: int | None,
    max_num_seqs: int,
    max_batch_tokens: int,
    max_queue: int,
    kv_cache_mb: float | None,
) -> Any:
    from modelc.config import CacheConfig, EngineConfig, SchedulerConfig

    return EngineConfig(
        engines=engines,
        threads=threads,
        cache=CacheConfig(kv_cache_mb=kv_cache_mb),
        scheduler=SchedulerConfig(
            max_num_seqs=max_num_seqs, max_batch_tokens=max(max_batch_tokens, max_num_seqs), max_queue=max_queue
        ),
    )


def run_cmd(
    artifact: str = typer.Argument(..., help="A .modelc file, a store name (name or name:VERSION), or raw weights."),
    port: int = typer.Option(8080, "--port", "-p", help="TCP port (0 = any free port)."),
    bind: str = typer.Option("127.0.0.1", "--bind", help="Address to listen on (0.0.0.0 for all interfaces)."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="MODELC_API_KEY", help="Require 'Authorization: Bearer KEY' (probes exempt)."
    ),
    rate_limit: int | None = typer.Option(None, "--rate-limit", help="Requests per minute per client IP (429)."),
    max_concurrent: int | None = typer.Option(None, "--max-concurrent", help="In-flight inference requests (503)."),
    max_queue: int = typer.Option(256, "--max-queue", help="Waiting sequences before the engine answers 503."),
    max_num_seqs: int = typer.Option(64, "--max-num-seqs", help="Sequences in one running batch."),
    max_batch_tokens: int = typer.Option(512, "--max-batch-tokens", help="Tokens per engine step (prefill chunks)."),
    kv_cache_mb: float | None = typer.Option(None, "--kv-cache-mb", help="KV cache size (default: from free RAM)."),
    request_timeout: float | None = typer.Option(None, "--request-timeout", help="Seconds per request (408)."),
    engines: int = typer.Option(1, "--engines", help="Engine workers (data parallel)."),
    threads: int | None = typer.Option(None, "--threads", help="numba threads per engine (default cores/engines)."),
    profile: bool = typer.Option(False, "--profile", help="Print load time at start and uptime at exit."),
    drain_timeout: float = typer.Option(30.0, "--drain-timeout", help="Seconds to finish requests on shutdown."),
    temperature: float | None = typer.Option(None, "--temperature", help="Default temperature."),
    top_p: float | None = typer.Option(None, "--top-p", help="Default top_p."),
    min_p: float | None = typer.Option(None, "--min-p", help="Default min_p."),
    repetition_penalty: float | None = typer.Option(None, "--repetition-penalty", help="Default repetition penalty."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="Default max_tokens."),
) -> None:
    """Serve a model: OpenAI-compatible /v1 API plus the native API, on 127.0.0.1:8080 by default."""
    from modelc.server.daemon import resolve_source, serve

    started = time.monotonic()
    config = ServerConfig(
        api_key=api_key,
        rate_limit_per_min=rate_limit,
        max_concurrent=max_concurrent,
        request_timeout_s=request_timeout,
        defaults=GenerationDefaults(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            min_p=min_p,
            repetition_penalty=repetition_penalty,
        ),
    )
    ecfg = engine_config(
        engines=engines,
        threads=threads,
        max_num_seqs=max_num_seqs,
        max_batch_tokens=max_batch_tokens,
        max_queue=max_queue,
        kv_cache_mb=kv_cache_mb,
    )
    source = resolve_source(artifact)

    def ready(host: str, bound_port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        print(
            f"modelc: serving {artifact} on http://{shown}:{bound_port} (Ctrl+C to stop)", file=sys.stderr, flush=True
        )
        if profile:
            print(f"modelc: ready in {time.monotonic() - started:.3f}s", file=sys.stderr, flush=True)

    anyio.run(
        lambda: serve(
            source,
            host=bind,
            port=port,
            server_config=config,
            engine_config=ecfg,
            ready_cb=ready,
            drain_timeout_s=drain_timeout,
        )
    )
    if profile:
        print(f"modelc: stopped after {time.monotonic() - started:.1f}s", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
