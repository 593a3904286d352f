"""Prometheus metrics of one app: its own CollectorRegistry, request/latency/token series,
and the engine's gauges (running, waiting, KV blocks, prefix cache, preemptions) read at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from modelc.kernels.runtime import hugepages

# The seed spec's buckets for modelc_inference_duration_seconds.
INFERENCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ITL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384)

# engine.stats() key -> (metric name, help, kind)
ENGINE_SERIES = (
    ("running", "modelc_num_requests_running", "Sequences in the running batch.", "gauge"),
    ("waiting", "modelc_num_requests_waiting", "Sequences waiting to be scheduled.", "gauge"),
    ("kv_blocks_used", "modelc_kv_blocks_used", "KV cache blocks in use.", "gauge"),
    ("kv_blocks_total", "modelc_kv_blocks_total", "KV cache blocks in the pool.", "gauge"),
    ("prefix_queries", "modelc_prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", "counter"),
    ("prefix_hits", "modelc_prefix_cache_hits", "Prompt tokens found in the prefix cache.", "counter"),
    ("preemptions", "modelc_num_preemptions", "Sequences preempted for lack of KV blocks.", "counter"),
    ("engine_restarts", "modelc_engine_restarts", "Engine workers restarted after a failed forward.", "counter"),
    # speculative decoding, as vLLM names it (vllm:spec_decode_*)
    (
        "spec_decode_num_drafts",
        "modelc_spec_decode_num_drafts",
        "Speculative verifications (steps with drafts).",
        "counter",
    ),
    ("spec_decode_num_draft_tokens", "modelc_spec_decode_num_draft_tokens", "Drafted tokens verified.", "counter"),
    (
        "spec_decode_num_accepted_tokens",
        "modelc_spec_decode_num_accepted_tokens",
        "Drafted tokens accepted.",
        "counter",
    ),
)


class EngineStatsCollector(Collector):
    """Reads engine.stats() at scrape time; emits nothing while the engine is loading."""

    def __init__(self, get_stats: Callable[[], dict[str, Any] | None]) -> None:
        self._get_stats = get_stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._get_stats()
        if not stats:
            return
        for key, name, doc, kind in ENGINE_SERIES:
            value = stats.get(key)
            if value is None:
                continue
            family = GaugeMetricFamily(name, doc) if kind == "gauge" else CounterMetricFamily(name, doc)
            family.add_metric([], float(value))
            yield family
        drafted = stats.get("spec_decode_num_draft_tokens")
        if drafted is not None:
            rate = GaugeMetricFamily(
                "modelc_spec_decode_draft_acceptance_rate",
                "Accepted / drafted tokens since start (0 before any draft).",
            )
            rate.add_metric([], float(stats.get("spec_decode_num_accepted_tokens", 0)) / drafted if drafted else 0.0)
            yield rate
        yield from _replica_series(stats.get("replicas") or [])
        yield from _hugepage_series()


def _hugepage_series() -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """This process's move of file-mapped weights onto huge pages (kernels/runtime/hugepages.py)."""
    moved = GaugeMetricFamily("modelc_hugepages_moved_bytes", "Weight bytes moved onto huge pages after load.")
    moved.add_metric([], float(hugepages.moved_bytes()))
    yield moved
    moving = GaugeMetricFamily("modelc_hugepages_moving", "1 while weights are moving onto huge pages, else 0.")
    moving.add_metric([], float(hugepages.moving()))
    yield moving
    failed = CounterMetricFamily(
        "modelc_hugepages_move_failures", "Weight mappings whose move onto huge pages stopped at a failed call."
    )
    failed.add_metric([], float(hugepages.move_failures()))
    yield failed


# Per Ray engine replica (modelc/replicas/): stats row key -> (metric name, help)
REPLICA_SERIES = (
    ("healthy", "modelc_replica_up", "1 while the engine replica serves, 0 while it restarts."),
    ("running", "modelc_replica_requests_running", "Sequences in the replica's running batch."),
    ("waiting", "modelc_replica_requests_waiting", "Sequences waiting on the replica."),
    ("kv_blocks_used", "modelc_replica_kv_blocks_used", "KV cache blocks in use on the replica."),
    ("kv_blocks_total", "modelc_replica_kv_blocks_total", "KV cache blocks of the replica."),
    ("prefix_queries", "modelc_replica_prefix_cache_queries", "Prompt tokens looked up in the replica's prefix cache."),
    ("prefix_hits", "modelc_replica_prefix_cache_hits", "Prompt tokens found in the replica's prefix cache."),
)


def _replica_series(rows: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily]:
    if not rows:
        return
    for key, name, doc in REPLICA_SERIES:
        family = GaugeMetricFamily(name, doc, labels=["replica"])
        for row in rows:
            family.add_metric([str(row["replica"])], float(row.get(key, 0)))
        yield family


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "modelc_requests", "HTTP requests by route and status.", ["route", "status"], registry=r
        )
        self.inference = Histogram(
            "modelc_inference_duration_seconds", "Inference request duration.", buckets=INFERENCE_BUCKETS, registry=r
        )
        self.active = Gauge("modelc_active_requests", "Inference requests in flight.", registry=r)
        self.tokens = Counter("modelc_tokens_generated", "Completion tokens generated.", registry=r)
        self.prompt_tokens = Counter("modelc_prompt_tokens", "Prompt tokens processed.", registry=r)
        self.ttft = Histogram(
            "modelc_time_to_first_token_seconds", "Time to first token.", buckets=TTFT_BUCKETS, registry=r
        )
        self.itl = Histogram(
            "modelc_inter_token_latency_seconds", "Time between streamed tokens.", buckets=ITL_BUCKETS, registry=r
        )
        self.queue_time = Histogram(
            "modelc_request_queue_time_seconds",
            "Time a sequence waited before its first scheduling (as the engine reports it).",
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.prompt_hist = Histogram(
            "modelc_request_prompt_tokens", "Prompt tokens per request.", buckets=TOKEN_BUCKETS, registry=r
        )
        self.generation_hist = Histogram(
            "modelc_request_generation_tokens", "Completion tokens per request.", buckets=TOKEN_BUCKETS, registry=r
        )
        self.rejected = Counter("modelc_requests_rejected", "Requests refused by backpressure.", ["reason"], registry=r)
        self._engine_getter: Callable[[], dict[str, Any] | None] = lambda: None
        r.register(EngineStatsCollector(lambda: self._engine_getter()))

    def watch_engine(self, get_stats: Callable[[], dict[str, Any] | None]) -> None:
        self._engine_getter = get_stats

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
