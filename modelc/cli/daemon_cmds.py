"""Client commands that talk to a running daemon over HTTP: ps, chat, generate, load, unload, lora, stop.

The daemon is found through MODELC_HOST or $MODELC_HOME/daemon.json (written by `modelc run`); the
work is in modelc.daemon.client. No model code here.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from modelc.cli.console import human_bytes
from modelc.daemon.client import DaemonClient, NoDaemonError
from modelc.daemon.launch import pid_alive

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)  # no wrapping in pipes
lora_app = typer.Typer(help="Load or unload LoRA adapters on a model in the running daemon.", no_args_is_help=True)


def _until(expires_at: str) -> str:
    if expires_at.startswith("9999"):
        return "forever"
    from datetime import datetime

    left = datetime.fromisoformat(expires_at.replace("Z", "+00:00")).timestamp() - time.time()
    if left <= 0:
        return "now"
    return f"{left:.0f}s" if left < 120 else f"{left / 60:.0f} min"


def ps_cmd() -> None:
    """Show the models loaded in the running daemon: memory, requests, KV cache use, keep-alive.

    Example: modelc ps
    """
    try:
        with DaemonClient() as c:
            models = c.get("/api/ps")["models"]
    except NoDaemonError:  # nothing recorded: show nothing rather than ask whoever listens on a port
        out.print("no daemon running (none recorded in $MODELC_HOME)")
        return
    if not models:
        out.print("no models loaded")
        return
    table = Table(
        "NAME",
        "ARCH",
        "MEMORY",
        "CONTEXT",
        "KV CACHE",
        "KV USE",
        "RUNNING",
        "WAITING",
        "UNTIL",
        "ADAPTERS",
        box=None,
        pad_edge=False,
    )
    for m in models:
        used, total = m.get("kv_blocks_used", 0), m.get("kv_blocks_total", 0)
        kv_use = f"{used}/{total} blocks ({100 * used / total:.0f}%)" if total else "-"
        table.add_row(
            m["name"] + (" (default)" if m.get("default") else ""),
            m["details"].get("family", ""),
            human_bytes(m["size"]),
            str(m.get("context_length") or "-"),
            human_bytes(m.get("kv_bytes", 0)),
            kv_use,
            str(m.get("running", 0)),
            str(m.get("waiting", 0)),
            _until(m["expires_at"]),
            ", ".join(m.get("adapters") or []) or "-",
        )
    out.print(table)
    for m in models:
        for r in m.get("replicas") or []:
            state = "up" if r["healthy"] else "restarting"
            out.print(
                f"  {m['name']} replica {r['replica']}: {state}, {r['running']} running, {r['waiting']} waiting, "
                f"KV {r['kv_blocks_used']}/{r['kv_blocks_total']} blocks, prefix hits "
                f"{r['prefix_hits']}/{r['prefix_queries']} tokens"
            )


def _options(max_tokens: int | None, temperature: float | None, seed: int | None) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if max_tokens is not None:
        opts["num_predict"] = max_tokens
    if temperature is not None:
        opts["temperature"] = temperature
    if seed is not None:
        opts["seed"] = seed
    return opts


def _default_model(c: DaemonClient) -> str:
    health = c.get("/health")
    return health.get("model") or ""


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def generate_cmd(
    model: str = typer.Argument(..., help="Model name (store name, name:VERSION, base:adapter)."),
    prompt: str = typer.Argument(..., help="The prompt; '-' reads it from stdin."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", "-n", min=1, help="Tokens to generate at most."),
    temperature: float | None = typer.Option(None, "--temperature", "-t", help="Sampling temperature (0 = greedy)."),
    seed: int | None = typer.Option(None, "--seed", help="Random seed."),
    raw: bool = typer.Option(False, "--raw", help="Send the prompt as is, without the chat template."),
) -> None:
    """Generate text from one prompt, streamed as it is produced (the model loads if need be).

    Example: modelc generate tiny "Once upon a time" --max-tokens 32
    """
    text = sys.stdin.read() if prompt == "-" else prompt
    body = {"model": model, "prompt": text, "raw": raw, "options": _options(max_tokens, temperature, seed)}
    with DaemonClient() as c:
        for obj in c.stream("/api/generate", body):
            _write(obj.get("response", ""))
    _write("\n")


def chat_cmd(
    model: str | None = typer.Argument(None, help="Model name (default: the daemon's default model)."),
    system: str | None = typer.Option(None, "--system", help="A system message for the conversation."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", "-n", min=1, help="Tokens per reply at most."),
    temperature: float | None = typer.Option(None, "--temperature", "-t", help="Sampling temperature (0 = greedy)."),
    seed: int | None = typer.Option(None, "--seed", help="Random seed."),
    whole: bool = typer.Option(False, "--whole", help="Stdin not a terminal: read all of it as one message."),
) -> None:
    """Chat with a model, multi-turn, replies streamed. Type /bye (or Ctrl+D) to leave.

    When stdin is not a terminal each line is one user turn (empty lines skipped) and only the
    replies are printed, one per turn; with --whole all of stdin is one message.

    Example: modelc chat tiny      |      printf 'hi\\nand then?\\n' | modelc chat tiny
    """
    options = _options(max_tokens, temperature, seed)
    interactive = sys.stdin.isatty()
    with DaemonClient() as c:
        name = model or _default_model(c)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        for turn in _turns(interactive, whole):
            messages.append({"role": "user", "content": turn})
            reply = []
            for obj in c.stream("/api/chat", {"model": name, "messages": messages, "options": options}):
                piece = (obj.get("message") or {}).get("content", "")
                reply.append(piece)
                _write(piece)
            _write("\n\n" if interactive else "\n")
            messages.append({"role": "assistant", "content": "".join(reply)})


def _turns(interactive: bool, whole: bool):
    if not interactive:
        if whole:
            text = sys.stdin.read().strip()
            if text:
                yield text
            return
        for line in sys.stdin:
            if line.strip():
                yield line.rstrip("\n")
        return
    while True:
        try:
            line = input(">>> ")
        except EOFError:
            _write("\n")
            return
        if line.strip() == "/bye":
            return
        if line.strip():
            yield line


def load_cmd(
    model: str = typer.Argument(..., help="Model name in the store (or a .modelc path)."),
    keep_alive: str | None = typer.Option(
        None, "--keep-alive", help="Keep it loaded this long when idle: seconds, '5m', '-1' (forever)."
    ),
    kv_cache_dtype: str | None = typer.Option(
        None,
        "--kv-cache-dtype",
        help="KV cache type for this model: auto, f32, f16, q8_0 or mixed (default: the daemon's).",
    ),
    ray: str | None = typer.Option(
        None, "--ray", help="Serve it through Ray engine replicas: 'local', 'auto' or HOST:PORT."
    ),
    replicas: int = typer.Option(2, "--replicas", help="Engine replicas with --ray."),
    cpus_per_replica: float = typer.Option(1.0, "--cpus-per-replica", help="CPUs per replica with --ray."),
    routing: str = typer.Option("affinity", "--routing", help="affinity, least_loaded or random (with --ray)."),
) -> None:
    """Load a model into the running daemon now (instead of on its first request).

    Example: modelc load tiny --keep-alive 10m --kv-cache-dtype q8_0
             modelc load tiny --ray local --replicas 2
    """
    body: dict[str, Any] = {"model": model}
    if keep_alive is not None:
        body["keep_alive"] = keep_alive
    options: dict[str, Any] = {}
    if kv_cache_dtype is not None:
        options["kv_cache_dtype"] = kv_cache_dtype
    if ray is not None:
        options.update(ray=ray, replicas=replicas, cpus_per_replica=cpus_per_replica, routing=routing)
    if options:
        body["options"] = options
    with DaemonClient() as c:
        r = c.post("/api/load", body)
    out.print(f"loaded {model} ({r['load_duration'] / 1e9:.2f}s)")


def unload_cmd(model: str = typer.Argument(..., help="A loaded model's name.")) -> None:
    """Unload a model from the running daemon (its running requests are aborted).

    Example: modelc unload tiny
    """
    with DaemonClient() as c:
        r = c.post("/api/unload", {"model": model})
    out.print(f"unloaded {model}" if r["unloaded"] else f"{model} was not loaded")


@lora_app.command("load")
def lora_load_cmd(
    model: str = typer.Argument(..., help="The base model's name (loaded if need be)."),
    path: str = typer.Argument(
        ..., help="LoRA adapter: a name or a .safetensors file / PEFT folder inside the daemon's --adapters-dir."
    ),
    name: str | None = typer.Option(None, "--name", help="Adapter name (default: the file name)."),
    alpha: float = typer.Option(1.0, "--alpha", help="Scale of the adapter's update."),
    global_: bool = typer.Option(False, "--global", help="Apply to every request, not only to MODEL:NAME."),
) -> None:
    """Load a LoRA adapter on a model; requests then pick it with the model name MODEL:NAME.

    Example: modelc lora load tiny ./style.safetensors --name style && modelc generate tiny:style hi
    """
    where = os.path.abspath(path) if os.path.exists(path) else path  # a file, or an adapter's name on the daemon
    body: dict[str, Any] = {"model": model, "path": where, "alpha": alpha, "global": global_}
    if name:
        body["adapter"] = name
    with DaemonClient() as c:
        r = c.post("/api/lora/load", body)
    out.print(f"loaded adapter {r['adapter']} on {model} ({r['applied']} tensors) - use model {model}:{r['adapter']}")


@lora_app.command("unload")
def lora_unload_cmd(
    model: str = typer.Argument(..., help="The base model's name."),
    name: str = typer.Argument(..., help="The adapter's name."),
) -> None:
    """Unload a LoRA adapter from a model.

    Example: modelc lora unload tiny style
    """
    with DaemonClient() as c:
        c.post("/api/lora/unload", {"model": model, "adapter": name})
    out.print(f"unloaded adapter {name} from {model}")


def stop_cmd(
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for the daemon to exit."),
) -> None:
    """Stop the running daemon gracefully (in-flight requests finish first).

    Example: modelc stop
    """
    from urllib.parse import urlparse

    from modelc.daemon.state_file import explicit_url, read_state
    from modelc.errors import ModelcError

    info = read_state()
    if explicit_url() is None and info is not None and not pid_alive(info.pid):
        raise ModelcError(f"the recorded daemon (pid {info.pid}) is not running; nothing to stop")
    with DaemonClient() as c:
        pid = (c.post("/api/shutdown") or {}).get("pid")
        local = urlparse(c.url).hostname in ("127.0.0.1", "localhost", "::1")
        deadline = time.monotonic() + timeout

        def running() -> bool:
            return pid_alive(pid) if local and isinstance(pid, int) else c.healthy()

        while running():
            if time.monotonic() > deadline:
                raise ModelcError(f"the daemon at {c.url} is still running after {timeout:.0f}s")
            time.sleep(0.1)
    out.print(f"stopped the daemon at {c.url}")


def register(app: typer.Typer) -> None:
    app.command("ps")(ps_cmd)
    app.command("chat")(chat_cmd)
    app.command("generate")(generate_cmd)
    app.command("load")(load_cmd)
    app.command("unload")(unload_cmd)
    app.command("stop")(stop_cmd)
    app.add_typer(lora_app, name="lora")
