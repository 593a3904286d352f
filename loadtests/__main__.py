"""`python -m loadtests run SCENARIO --target URL ...`, `python -m loadtests soak --minutes N ...` and
`python -m loadtests --compare A.json B.json`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from loadtests.report import compare_table, print_table, runs_table, write_charts
from loadtests.sweep import Sweep, SweepError, levels_for, parse_levels, run_sweep
from loadtests.workload import SCENARIOS, WorkloadConfig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m loadtests", description=__doc__)
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="compare two result files")
    sub = ap.add_subparsers(dest="cmd")
    run = sub.add_parser(
        "run",
        help="run a scenario",
        description="Example: python -m loadtests run steady "
        "--target http://127.0.0.1:8080 --requests 32 --concurrency 1,4,8",
    )
    run.add_argument("scenario", choices=SCENARIOS)
    run.add_argument("--target", default="http://127.0.0.1:8080", help="the only URL requests go to")
    run.add_argument("--model", default=None)
    run.add_argument("--api-key", default=os.environ.get("MODELC_API_KEY"))
    run.add_argument("--requests", type=int, default=32)
    run.add_argument("--duration", type=float, default=None, help="stop sending after this many seconds")
    run.add_argument("--concurrency", default="4", help="closed loop: N or a sweep 1,2,4,8")
    run.add_argument("--rate", type=float, default=None, help="open loop: requests per second (poisson arrivals)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--prompt-words", default="8,64", help="min,max words per prompt")
    run.add_argument("--output-tokens", default="8,64", help="min,max max_tokens per request (N,N: fixed)")
    run.add_argument("--ignore-eos", action="store_true", help="generate exactly max_tokens (fixed output length)")
    run.add_argument("--shared-prefix-words", type=int, default=400, help="shared-prefix: words in the prefix")
    run.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    run.add_argument("--out", default=None, help="write results JSON here")
    run.add_argument("--chart", default=None, help="write a PNG chart here (needs matplotlib)")
    return ap.parse_args(argv)


def pair(s: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in s.split(","))
    except ValueError:
        raise SweepError(f"expected MIN,MAX; got {s!r}") from None
    if not 0 < a <= b:
        raise SweepError(f"expected 0 < MIN <= MAX; got {s!r}")
    return a, b


def sweep_from_args(args: argparse.Namespace) -> Sweep:
    scenario = "poisson" if args.rate and args.scenario == "steady" else args.scenario
    wl = WorkloadConfig(
        scenario=scenario,
        num_requests=args.requests,
        seed=args.seed,
        rate=args.rate or 4.0,
        prompt_words=pair(args.prompt_words),
        output_tokens=pair(args.output_tokens),
        shared_prefix_words=args.shared_prefix_words,
        ignore_eos=args.ignore_eos,
    )
    return Sweep(
        scenario=scenario,
        target=args.target,
        levels=levels_for(scenario, parse_levels(args.concurrency), args.requests),
        workload=wl,
        model=args.model,
        api_key=args.api_key,
        duration_s=args.duration,
        timeout_s=args.timeout,
    )


def write_json(path: str, obj: dict) -> None:
    """Atomically: a temp file beside `path`, then a rename."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["soak"]:  # N minutes of mixed traffic with RSS/files/KV/p99 samples (loadtests/soak.py)
        from loadtests.soak import main as soak_main

        return soak_main(argv[1:])
    args = parse_args(argv)
    if args.compare:
        a, b = (json.loads(open(p).read()) for p in args.compare)
        ra = a["runs"] if "runs" in a else [a]
        rb = b["runs"] if "runs" in b else [b]
        for x, y in zip(ra, rb, strict=False):
            print_table(compare_table(x, y, os.path.basename(args.compare[0]), os.path.basename(args.compare[1])))
        return 0
    if args.cmd != "run":
        parse_args(["--help"])
        return 2
    try:
        sweep = sweep_from_args(args)
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    runs = run_sweep(sweep)
    print_table(runs_table(runs, title=f"{sweep.scenario} against {sweep.target}"))
    if args.out:
        write_json(args.out, {"runs": runs, "load_avg": list(os.getloadavg())})
    if args.chart and write_charts(runs, args.chart) is None:
        print("note: matplotlib is not installed; no chart written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
