"""`python -m loadtests.serve_bench ARTIFACT`: modelc's server in this process on 127.0.0.1 (a free port), one
scenario swept over concurrency levels with loadtests, the report printed, the server stopped.

Every request generates exactly `output_tokens` tokens (ignore_eos), so tokens/s compare across levels.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from loadtests.server_thread import ServerThread
from loadtests.sweep import Sweep, SweepError, levels_for, parse_levels, run_sweep
from loadtests.workload import SCENARIOS, WorkloadConfig
from modelc.errors import InvalidRequestError, ModelcError


def serve_and_sweep(
    source: Any,
    *,
    scenario: str = "steady",
    num_requests: int = 16,
    concurrency: str | tuple[int, ...] = (1, 4, 8),
    output_tokens: int = 32,
    engine_config: Any = None,
    seed: int = 0,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """{"runs": [report per level], "load_avg_before", "load_avg_after", "engine_stats"}.

    source: anything modelc.server.daemon.serve takes (an IR Model, an Artifact, a .modelc path)."""
    if scenario not in SCENARIOS:
        raise InvalidRequestError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    if num_requests < 1 or output_tokens < 1:
        raise InvalidRequestError("--requests and --gen-tokens must be >= 1")
    try:
        levels = parse_levels(concurrency) if isinstance(concurrency, str) else tuple(concurrency)
        wl = WorkloadConfig(scenario=scenario, num_requests=num_requests, seed=seed,
                            output_tokens=(output_tokens, output_tokens), ignore_eos=True)  # fmt: skip
        load_before = list(os.getloadavg())
        with ServerThread(source, engine_config=engine_config) as srv:
            sweep = Sweep(scenario, srv.url, levels_for(scenario, levels, num_requests), wl, timeout_s=timeout_s)
            runs = run_sweep(sweep)
            stats = srv.engine_stats()
    except SweepError as e:
        raise InvalidRequestError(str(e)) from None
    return {"runs": runs, "load_avg_before": load_before, "load_avg_after": list(os.getloadavg()),
            "engine_stats": stats}  # fmt: skip


def bench_serve(artifact: str, *, scenario: str, num_requests: int, concurrency: str, output_tokens: int,
                threads: int | None, as_json: bool) -> None:  # fmt: skip
    """What `python -m loadtests.serve_bench ARTIFACT` runs: resolve ARTIFACT as `modelc run` does, sweep, print."""
    import json

    from loadtests.report import print_table, runs_table
    from modelc.config import EngineConfig
    from modelc.server.daemon import resolve_source

    res = serve_and_sweep(resolve_source(artifact), scenario=scenario, num_requests=num_requests,
                          concurrency=concurrency, output_tokens=output_tokens,
                          engine_config=EngineConfig(threads=threads))  # fmt: skip
    if as_json:
        print(json.dumps(res))
        return
    print_table(runs_table(res["runs"], title=f"{scenario}: {artifact} (in-process server)"))
    la, lb = res["load_avg_before"][0], res["load_avg_after"][0]
    print(f"load average {la:.2f} before, {lb:.2f} after; {output_tokens} tokens per request (ignore_eos)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtests.serve_bench", description=__doc__)
    ap.add_argument("artifact", help="a .modelc file, raw weights or a store name")
    ap.add_argument("--scenario", default="steady", help="the loadtests scenario")
    ap.add_argument("--requests", type=int, default=16, help="requests per concurrency level")
    ap.add_argument("--concurrency", default="1,4,8", help="concurrent streams, e.g. 1,4,8")
    ap.add_argument("--gen-tokens", type=int, default=128, help="tokens each request generates")
    ap.add_argument("--threads", type=int, default=None, help="compute threads (default: numba's)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    try:
        if args.gen_tokens < 1:
            raise InvalidRequestError("--gen-tokens must be >= 1")
        bench_serve(args.artifact, scenario=args.scenario, num_requests=args.requests, concurrency=args.concurrency,
                    output_tokens=args.gen_tokens, threads=args.threads, as_json=args.json)  # fmt: skip
    except ModelcError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
