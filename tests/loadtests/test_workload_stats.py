from __future__ import annotations

import math

import numpy as np
import pytest

from loadtests.client import metric_total, parse_prometheus, request_body
from loadtests.drive import server_deltas
from loadtests.stats import decode_tokens_per_s, percentile, summarize, union_length
from loadtests.sweep import Sweep, SweepError, levels_for, parse_levels
from loadtests.workload import SCENARIOS, WorkloadConfig, build_workload


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_seed_same_workload(scenario):
    a = build_workload(WorkloadConfig(scenario=scenario, num_requests=20, seed=7))
    b = build_workload(WorkloadConfig(scenario=scenario, num_requests=20, seed=7))
    c = build_workload(WorkloadConfig(scenario=scenario, num_requests=20, seed=8))
    assert [s.to_json() for s in a] == [s.to_json() for s in b]
    assert [s.to_json() for s in a] != [s.to_json() for s in c]
    assert len(a) == 20


def test_scenario_shapes():
    pois = build_workload(WorkloadConfig(scenario="poisson", num_requests=200, seed=1, rate=10.0))
    gaps = np.diff([0.0] + [s.arrival_s for s in pois])
    assert all(g > 0 for g in gaps)
    assert 0.07 < gaps.mean() < 0.13  # mean inter-arrival ~ 1/rate
    shared = build_workload(WorkloadConfig(scenario="shared-prefix", num_requests=5, seed=1))
    prefix = shared[0].prompt.split("\n\n")[0]
    assert all(s.prompt.startswith(prefix + "\n\n") for s in shared)
    storm = build_workload(WorkloadConfig(scenario="cancel-storm", num_requests=100, seed=3))
    n_cancel = sum(s.cancel_after_tokens is not None for s in storm)
    assert 30 < n_cancel < 70
    mixed = build_workload(WorkloadConfig(scenario="mixed-sampling", num_requests=100, seed=3))
    assert {s.kind for s in mixed} == {"greedy", "temperature", "json_schema", "tools"}
    with pytest.raises(ValueError, match="unknown scenario"):
        build_workload(WorkloadConfig(scenario="nope"))


@pytest.mark.parametrize("n", [1, 2, 5, 100, 1001])
def test_percentiles_match_numpy(n):
    rng = np.random.default_rng(n)
    xs = rng.exponential(size=n).tolist()
    for q in (0, 1, 50, 90, 99, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)
    s = summarize(xs)
    assert s["count"] == n and s["p50"] == pytest.approx(float(np.median(xs)))


def test_summarize_empty_and_prometheus_parse():
    assert summarize([])["count"] == 0
    text = '# HELP x\nmodelc_requests_total{endpoint="a"} 3.0\nmodelc_requests_total{endpoint="b"} 2\nother 1\n'
    samples = parse_prometheus(text)
    assert metric_total(samples, "modelc_requests_total") == 5.0
    assert metric_total(samples, "missing") == 0.0


def test_union_and_decode_rate():
    assert union_length([]) == 0.0
    assert union_length([(0, 1), (0.5, 2), (3, 4), (3.5, 3.6), (5, 5)]) == pytest.approx(3.0)
    # two streams in lockstep: 10 tokens each after the first, decoding over the same 1 s -> 20 tok/s
    lockstep = [{"error": None, "sent_s": 0.0, "ttft_s": 0.5, "e2e_s": 1.5, "completion_tokens": 11}] * 2
    assert decode_tokens_per_s(lockstep) == pytest.approx(20.0)
    # one after the other: the same tokens over 2 s -> 10 tok/s
    serial = [lockstep[0], {**lockstep[0], "sent_s": 1.5}]
    assert decode_tokens_per_s(serial) == pytest.approx(10.0)
    cancelled = {**lockstep[0], "cancelled": True}
    assert decode_tokens_per_s([lockstep[0], cancelled]) == pytest.approx(10.0)
    assert math.isnan(decode_tokens_per_s([]))


def test_metric_labels_and_server_deltas():
    before = parse_prometheus(
        'modelc_requests_total{route="/v1/completions",status="200"} 2\n'
        'modelc_requests_total{route="/metrics",status="200"} 5\n'
        "modelc_tokens_generated_total 10\n"
    )
    after = parse_prometheus(
        'modelc_requests_total{route="/v1/completions",status="200"} 5\n'
        'modelc_requests_total{route="/v1/chat/completions",status="503"} 1\n'
        'modelc_requests_total{route="/metrics",status="200"} 9\n'
        "modelc_tokens_generated_total 42\nmodelc_kv_blocks_used 0\n"
    )
    assert metric_total(after, "modelc_requests_total", route="/metrics") == 9
    assert metric_total(after, "modelc_requests_total", route=("/v1/completions", "/metrics"), status="200") == 14
    d = server_deltas(before, after)
    assert d["modelc_requests_total"] == 4  # inference routes only: /metrics scrapes are not requests of the run
    assert d["modelc_tokens_generated_total"] == 32 and d["modelc_kv_blocks_used_after"] == 0
    assert "modelc_num_requests_running_after" not in d
    assert server_deltas({}, {}) == {}


def test_sweep_arguments():
    assert parse_levels("1, 4,8") == (1, 4, 8)
    for bad in ("", "0", "a,b"):
        with pytest.raises(SweepError):
            parse_levels(bad)
    assert levels_for("poisson", (1, 4), 9) == (None,) and levels_for("burst", (1, 4), 9) == (9,)
    assert levels_for("steady", (1, 4), 9) == (1, 4)
    with pytest.raises(SweepError, match="unknown scenario"):
        Sweep("nope")
    with pytest.raises(SweepError, match="not an http"):
        Sweep("steady", target="ftp://127.0.0.1")
    with pytest.raises(SweepError, match="requests"):
        Sweep("steady", workload=WorkloadConfig(scenario="steady", num_requests=0))
    with pytest.raises(SweepError, match="duration"):
        Sweep("steady", duration_s=0)


def test_cli_rejects_bad_arguments(capsys):
    from loadtests.__main__ import main

    assert main(["run", "steady", "--output-tokens", "9,3"]) == 2
    assert "MIN <= MAX" in capsys.readouterr().err
    assert main(["run", "steady", "--concurrency", "0"]) == 2


def test_ignore_eos_and_early_cancels():
    specs = build_workload(WorkloadConfig(scenario="cancel-storm", num_requests=200, seed=2, ignore_eos=True))
    assert all(s.extra["ignore_eos"] for s in specs)
    cut = [s for s in specs if s.cancel_after_tokens is not None]
    assert cut and all(1 <= s.cancel_after_tokens <= max(1, s.max_tokens // 4) for s in cut)
    body = request_body(specs[0], "m")[1]
    assert body["ignore_eos"] is True and body["model"] == "m" and body["stream"] is True
    plain = build_workload(WorkloadConfig(scenario="steady", num_requests=3))
    assert "ignore_eos" not in request_body(plain[0], None)[1]
