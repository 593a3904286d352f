"""One scenario at one or several concurrency levels against one target: the reports, in order.

Each level gets its own seed (seed + level index), so a level does not hit the prefix cache
with the prompts of the level before it; the same arguments give the same workloads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlparse

import anyio

from loadtests.drive import DriveConfig, drive
from loadtests.workload import SCENARIOS, WorkloadConfig, build_workload

MAX_REQUESTS = 100_000
MAX_DURATION_S = 6 * 3600


class SweepError(ValueError):
    """Bad sweep arguments (a message for the user)."""


@dataclass(frozen=True, slots=True)
class Sweep:
    scenario: str
    target: str = "http://127.0.0.1:8080"
    levels: tuple[int | None, ...] = (4,)  # closed-loop concurrency; None = open loop (poisson)
    workload: WorkloadConfig | None = None  # sizes; scenario and seed are taken from here when given
    model: str | None = None
    api_key: str | None = None
    duration_s: float | None = None
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise SweepError(f"unknown scenario {self.scenario!r}; choose one of {', '.join(SCENARIOS)}")
        url = urlparse(self.target)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise SweepError(f"target {self.target!r} is not an http(s) URL")
        n = (self.workload or WorkloadConfig(scenario=self.scenario)).num_requests
        if not 0 < n <= MAX_REQUESTS:
            raise SweepError(f"requests must be in 1..{MAX_REQUESTS}")
        if self.duration_s is not None and not 0 < self.duration_s <= MAX_DURATION_S:
            raise SweepError(f"duration must be in (0, {MAX_DURATION_S}] seconds")
        if not self.levels or any(c is not None and c < 1 for c in self.levels):
            raise SweepError("concurrency levels must be >= 1")


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(c) for c in str(text).split(",") if c.strip())
    except ValueError:
        raise SweepError(f"concurrency must be N or a list like 1,4,8; got {text!r}") from None
    if not levels or min(levels) < 1:
        raise SweepError(f"concurrency levels must be >= 1; got {text!r}")
    return levels


def levels_for(scenario: str, levels: tuple[int, ...], num_requests: int) -> tuple[int | None, ...]:
    """poisson is open loop (one run); burst sends everything at once; the rest are closed loops."""
    if scenario == "poisson":
        return (None,)
    if scenario == "burst":
        return (num_requests,)
    return levels


def run_sweep(sweep: Sweep) -> list[dict]:
    """Every level's report (see drive.make_report) plus scenario, seed and level keys."""
    wl = sweep.workload or WorkloadConfig(scenario=sweep.scenario)
    runs = []
    for i, c in enumerate(sweep.levels):
        level_wl = replace(wl, scenario=sweep.scenario, seed=wl.seed + i)
        specs = build_workload(level_wl)
        cfg = DriveConfig(target=sweep.target, model=sweep.model, api_key=sweep.api_key, concurrency=c,
                          duration_s=sweep.duration_s, timeout_s=sweep.timeout_s)  # fmt: skip
        report = anyio.run(drive, specs, cfg)
        report.update(scenario=sweep.scenario, seed=level_wl.seed, level=i)
        runs.append(report)
    return runs
