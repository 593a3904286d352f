"""`modelc bench`: cold start (with and without the numba cache), load time, prefill and decode speed, latency, RSS.

Runs the model in-process on the sync Engine's EngineCore, one sequence at a time (each timed step
is schedule -> forward -> update); cold starts are measured in fresh subprocesses.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

import typer

from modelc.cli.console import json_text
from modelc.errors import InvalidRequestError, ModelcError

PROBE_ERROR = "modelc-probe-error: "  # the probe's ModelcError, passed on as the one line every command prints
_PROBE = (
    "import sys; from modelc.cli.bench_cmds import ready_probe; "
    "ready_probe(sys.argv[1], int(sys.argv[2]) if sys.argv[2] != '0' else None)"
)


def ready_probe(path: str, threads: int | None) -> None:
    """Load the model and warm it up (compiles, or loads from the numba cache, every kernel a request uses)."""
    from modelc.api.engine import Engine

    try:
        eng = Engine.load(path, threads=threads, kv_cache_tokens=128)
        eng.runner.warmup()
    except ModelcError as e:
        print(f"{PROBE_ERROR}{e}", file=sys.stderr)
        raise SystemExit(1) from None


def cold_start_s(path: str, threads: int | None, *, fresh_cache: bool) -> float:
    """Seconds from process start to a model that has generated (fresh_cache: empty NUMBA_CACHE_DIR)."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="modelc-numba-") as tmp:
        if fresh_cache:  # nothing cached: neither compiled kernels nor repacked weights (models/r16_cache.py)
            env["NUMBA_CACHE_DIR"] = tmp
            env["MODELC_REPACK_CACHE_DIR"] = os.path.join(tmp, "repacked")
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, path, str(threads or 0)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        dt = time.perf_counter() - t0
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["no output"]
        for line in lines:
            if line.startswith(PROBE_ERROR):  # a bad model: its message, as an in-process load says it
                raise ModelcError(line.removeprefix(PROBE_ERROR))
        raise ModelcError(f"cold-start probe failed: {lines[-1]}")
    return dt


def _percentile(xs: list[float], q: float) -> float:
    import numpy as np  # lazy: the CLI imports this module for every command (even --help)

    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def run_bench(
    path: str, *, prompt_tokens: list[int], gen_tokens: int, runs: int, threads: int | None, cold: bool = True
) -> dict[str, Any]:
    """Every measurement as a dict (what --json prints). Each timed step is one EngineCore.step() of the
    sync Engine: scheduling, the forward and the update, as the served engine runs them."""
    import numpy as np  # lazy: the CLI imports this module for every command (even --help)

    from modelc.api.engine import Engine
    from modelc.kernels.runtime import hugepages
    from modelc.request import SamplingParams
    from modelc.scheduler.output import TokenEmitted
    from modelc.scheduler.sequence import Sequence

    result: dict[str, Any] = {"model": path, "threads": threads, "load_avg_before": list(os.getloadavg())}
    if cold:
        cold_start_s(path, threads, fresh_cache=False)  # populate the cache for the warm measurement
        result["cold_start_no_cache_s"] = cold_start_s(path, threads, fresh_cache=True)
        result["cold_start_cached_s"] = cold_start_s(path, threads, fresh_cache=False)
    t0 = time.perf_counter()
    need = max(prompt_tokens) + gen_tokens + 16
    eng = Engine.load(path, threads=threads, kv_cache_tokens=need)
    result["load_s"] = time.perf_counter() - t0
    runner, core = eng.runner, eng.core
    result.update(name=eng.name, architecture=eng.architecture, vocab_size=runner.vocab_size)
    rng = np.random.default_rng(0)
    # the prefill's token and gen_tokens decoded ones; ignore_eos: every run is the same length
    greedy = SamplingParams(temperature=0.0, max_tokens=gen_tokens + 1, ignore_eos=True)
    seq = iter(range(1 << 30))

    def step() -> tuple[bool, float]:
        """One step; (a token was sampled, seconds)."""
        t = time.perf_counter()
        events = core.step()
        dt = time.perf_counter() - t
        for ev in events:
            if ev.finish is not None and ev.finish.finish_reason == "error":
                raise InvalidRequestError(f"benchmark forward failed: {ev.finish.error}")
        return any(isinstance(ev, TokenEmitted) for ev in events), dt

    def prefill(n: int) -> tuple[int, float]:
        """Add an n-token random prompt and step until its first token; (seq id, seconds)."""
        sid = next(seq)
        core.add(Sequence(sid, rng.integers(0, runner.vocab_size, n).astype(np.int32).tolist(), greedy))
        total, sampled = 0.0, False
        while not sampled:
            sampled, dt = step()
            total += dt
        return sid, total

    def end(sid: int) -> None:
        core.abort(sid)
        core.release()

    result["warmup_s"] = runner.warmup()  # every kernel compiled or loaded before timing
    t0 = time.perf_counter()
    hugepages.wait()  # the weights' move onto huge pages after the load (seconds): time the steady state
    result["hugepages_move_s"] = time.perf_counter() - t0
    prefill_rates: dict[str, float] = {}
    for n in prompt_tokens:
        times = []
        for _ in range(runs):
            sid, dt = prefill(n)
            end(sid)
            times.append(dt)
        prefill_rates[str(n)] = n / float(np.median(times))
    result["prefill_tok_s"] = prefill_rates
    lat: list[float] = []
    decode_rates = []
    p0 = prompt_tokens[0]
    for _ in range(runs):
        sid, _ = prefill(p0)
        run_lat = [step()[1] for _ in range(gen_tokens)]
        end(sid)
        lat += run_lat
        decode_rates.append(len(run_lat) / sum(run_lat) if run_lat else float("nan"))
    result["decode_tok_s"] = float(np.median(decode_rates))
    result["decode_context_tokens"] = p0
    result["token_latency_ms"] = {"p50": _percentile(lat, 50) * 1e3, "p99": _percentile(lat, 99) * 1e3}
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["weights_mb"] = eng.source.total_bytes / 2**20  # tensors as stored (the RSS budget counts these)
    result["kv_cache_mb"] = runner.kv.nbytes / 2**20
    result["load_avg_after"] = list(os.getloadavg())
    return result


def _parse_counts(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidRequestError(f"--prompt-tokens must be comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise InvalidRequestError("--prompt-tokens needs positive token counts")
    return vals


def bench_cmd(
    artifact: str = typer.Argument(..., help="A .modelc file, raw weights (GGUF, HF folder) or a store name."),
    prompt_tokens: str = typer.Option(
        "128,512", "--prompt-tokens", help="Prompt lengths for prefill, comma-separated."
    ),
    gen_tokens: int = typer.Option(128, "--gen-tokens", help="Tokens to decode per run."),
    runs: int = typer.Option(5, "--runs", help="Repetitions of each measurement (medians reported)."),
    threads: int | None = typer.Option(None, "--threads", help="Compute threads (default: numba's)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    no_cold: bool = typer.Option(False, "--no-cold-start", help="Skip the cold-start subprocess measurements."),
) -> None:
    """Measure cold start, load time, prefill/decode speed, per-token latency and peak RSS.

    Served throughput (an in-process server under a load-test scenario) is
    `python -m loadtests.serve_bench MODEL`."""
    if runs < 1 or gen_tokens < 1:
        raise InvalidRequestError("--runs and --gen-tokens must be >= 1")
    res = run_bench(
        artifact,
        prompt_tokens=_parse_counts(prompt_tokens),
        gen_tokens=gen_tokens,
        runs=runs,
        threads=threads,
        cold=not no_cold,
    )
    if as_json:
        typer.echo(json_text(res))
        return
    lines = [f"model            {res['name']} ({res['architecture']})"]
    if "cold_start_no_cache_s" in res:
        lines.append(
            f"cold start       {res['cold_start_no_cache_s']:.2f} s without numba cache, "
            f"{res['cold_start_cached_s']:.2f} s with"
        )
    lines.append(f"load             {res['load_s'] * 1e3:.0f} ms")
    for n, v in res["prefill_tok_s"].items():
        lines.append(f"prefill {n:>6}   {v:.1f} tok/s")
    lat = res["token_latency_ms"]
    lines.append(f"decode           {res['decode_tok_s']:.2f} tok/s (p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms)")
    lines.append(
        f"peak RSS         {res['peak_rss_mb']:.0f} MB (weights {res['weights_mb']:.0f} MB, "
        f"KV cache {res['kv_cache_mb']:.0f} MB)"
    )
    lines.append(f"load average     {res['load_avg_before'][0]:.2f} before, {res['load_avg_after'][0]:.2f} after")
    typer.echo("\n".join(lines))


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_cmd)
