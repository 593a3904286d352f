"""Load options that build a model's own engine config, and the per-replica metric series."""

from __future__ import annotations

import pytest

from modelc.config import EngineConfig, ReplicaConfig
from modelc.errors import InvalidRequestError
from modelc.server.manager.load_options import engine_config_for
from modelc.server.metrics import Metrics


def test_scale_out_options_build_a_replica_config():
    base = EngineConfig(threads=1)
    assert engine_config_for(base, {}) is None
    assert engine_config_for(base, {"options": {"temperature": 0.5}}) is None  # sampling options are per request
    opts = {"ray": "local", "replicas": 3, "cpus_per_replica": 0.5, "routing": "random", "kv_cache_dtype": "q8_0"}
    cfg = engine_config_for(base, {"options": opts})
    assert cfg.threads == 1 and cfg.replicas == ReplicaConfig(replicas=3, cpus_per_replica=0.5, policy="random")
    assert cfg.cache.kv_dtype == "q8_0"
    assert engine_config_for(base, {"options": {"replicas": 2}}).replicas.address is None  # local by default
    assert engine_config_for(base, {"options": {"ray": "10.0.0.5:6379"}}).replicas.address == "10.0.0.5:6379"


@pytest.mark.parametrize(
    "options",
    [[1], {"ray": 5}, {"ray": ""}, {"replicas": 0}, {"replicas": "2"}, {"replicas": 1.5}, {"replicas": True},
     {"cpus_per_replica": -1}, {"routing": "round_robin"}],
)  # fmt: skip
def test_bad_scale_out_options_are_clear_errors(options):
    with pytest.raises(InvalidRequestError):
        engine_config_for(EngineConfig(), {"options": options})


def test_metrics_have_a_series_per_replica():
    m = Metrics()
    rows = [
        {"replica": 0, "healthy": True, "running": 2, "waiting": 0, "kv_blocks_used": 5, "kv_blocks_total": 10,
         "prefix_queries": 64, "prefix_hits": 48},
        {"replica": 1, "healthy": False, "running": 0, "waiting": 0, "kv_blocks_used": 0, "kv_blocks_total": 10,
         "prefix_queries": 0, "prefix_hits": 0},
    ]  # fmt: skip
    m.watch_engine(lambda: {"running": 2, "kv_blocks_used": 5, "replicas": rows})
    text = m.exposition().decode()
    assert 'modelc_replica_up{replica="0"} 1.0' in text and 'modelc_replica_up{replica="1"} 0.0' in text
    assert 'modelc_replica_prefix_cache_hits{replica="0"} 48.0' in text
    assert "modelc_num_requests_running 2.0" in text


def test_an_unreachable_ray_address_fails_in_seconds():
    from modelc.errors import ModelcError
    from modelc.replicas.cluster import _reachable

    with pytest.raises(ConnectionError, match="nothing answers"):
        _reachable("127.0.0.1:1", timeout_s=2)
    with pytest.raises(ModelcError, match="HOST:PORT"):
        _reachable("no-port-here")
