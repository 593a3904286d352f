"""`python -m loadtests run SCENARIO --target URL ...` and `python -m loadtests --compare A.json B.json`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from urllib.parse import urlparse

import anyio

from loadtests.drive import DriveConfig, drive
from loadtests.report import compare_table, print_table, runs_table, write_charts
from loadtests.workload import SCENARIOS, WorkloadConfig, build_workload

MAX_REQUESTS = 100_000
MAX_DURATION_S = 6 * 3600


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
    run.add_argument("--target", default="http://127.0.0.1:8080")
    run.add_argument("--model", default=None)
    run.add_argument("--api-key", default=os.environ.get("MODELC_API_KEY"))
    run.add_argument("--requests", type=int, default=32)
    run.add_argument("--duration", type=float, default=None, help="stop sending after this many seconds")
    run.add_argument("--concurrency", default="4", help="closed loop: N or a sweep 1,2,4,8")
    run.add_argument("--rate", type=float, default=None, help="open loop: requests per second (poisson arrivals)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--prompt-words", default="8,64")
    run.add_argument("--output-tokens", default="8,64")
    run.add_argument("--timeout", type=float, default=300.0)
    run.add_argument("--out", default=None, help="write results JSON here")
    run.add_argument("--chart", default=None, help="write a PNG chart here (needs matplotlib)")
    return ap.parse_args(argv)


def _pair(s: str) -> tuple[int, int]:
    a, b = (int(x) for x in s.split(","))
    return a, b


def run_scenario(args: argparse.Namespace) -> list[dict]:
    host = urlparse(args.target).hostname
    if host is None:
        raise SystemExit(f"error: --target {args.target!r} is not a URL")
    if not 0 < args.requests <= MAX_REQUESTS:
        raise SystemExit(f"error: --requests must be in 1..{MAX_REQUESTS}")
    if args.duration is not None and not 0 < args.duration <= MAX_DURATION_S:
        raise SystemExit(f"error: --duration must be in (0, {MAX_DURATION_S}]")
    scenario = "poisson" if args.rate and args.scenario == "steady" else args.scenario
    wl = WorkloadConfig(
        scenario=scenario,
        num_requests=args.requests,
        seed=args.seed,
        rate=args.rate or 4.0,
        prompt_words=_pair(args.prompt_words),
        output_tokens=_pair(args.output_tokens),
    )
    specs = build_workload(wl)
    if scenario in ("poisson",):
        levels: list[int | None] = [None]
    elif scenario == "burst":
        levels = [len(specs)]
    else:
        levels = [int(c) for c in str(args.concurrency).split(",")]
    runs = []
    for c in levels:
        cfg = DriveConfig(
            target=args.target,
            model=args.model,
            api_key=args.api_key,
            concurrency=c,
            duration_s=args.duration,
            timeout_s=args.timeout,
        )
        report = anyio.run(drive, specs, cfg)
        report["scenario"] = scenario
        report["seed"] = args.seed
        runs.append(report)
    return runs


def main(argv: list[str] | None = None) -> int:
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
    runs = run_scenario(args)
    print_table(runs_table(runs, title=f"{args.scenario} against {args.target}"))
    if args.out:
        d = os.path.dirname(os.path.abspath(args.out))
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"runs": runs}, f, indent=1)
        os.replace(tmp, args.out)
    if args.chart:
        if write_charts(runs, args.chart) is None:
            print("note: matplotlib is not installed; no chart written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
