"""models/streaming.py: a streamed model computes what the resident one does, reads its layers from the file as
the forward enters them and frees the page cache of the layers it has left."""

from __future__ import annotations

import ctypes
import mmap
import os
import time

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.artifact.reader import open_artifact
from modelc.artifact.writer import write_artifact
from modelc.models import residency
from modelc.models.streaming import Streamer, spans_of
from modelc.models.tiny import make_tiny_llama
from modelc.request import SamplingParams

PAGE = mmap.PAGESIZE


@pytest.fixture
def artifact(tmp_path):
    """A 6-layer f32 llama of ~2.3 MB a layer, as a file (streaming works on the file mapping)."""
    model = make_tiny_llama(3, hidden_size=256, intermediate_size=512, num_layers=6, num_heads=4, num_kv_heads=2)
    return write_artifact(model, tmp_path / "tiny.modelc")


def _resident_pages(addr: int, size: int) -> int:
    """Pages of [addr, addr + size) in the page cache (mincore)."""
    lo, hi = addr // PAGE * PAGE, -(-(addr + size) // PAGE) * PAGE
    vec = (ctypes.c_ubyte * ((hi - lo) // PAGE))()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    assert libc.mincore(lo, hi - lo, vec) == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec)


def _evicts(path: str) -> bool:
    """Whether posix_fadvise(DONTNEED) frees this file's page cache (not on tmpfs, whose pages are the file)."""
    best, fs = "", ""
    for line in open("/proc/mounts"):
        parts = line.split()
        if len(parts) > 2 and os.path.realpath(path).startswith(parts[1]) and len(parts[1]) > len(best):
            best, fs = parts[1], parts[2]
    return fs not in ("tmpfs", "ramfs", "")


def _greedy(source, weights: str, n: int = 12) -> tuple[list[int], Engine]:
    eng = Engine(source, kv_cache_tokens=64, weights=weights)
    return list(eng.generate_ids([1, 5, 9, 33], SamplingParams(max_tokens=n, temperature=0.0))), eng


def test_a_streamed_model_generates_the_resident_models_tokens(artifact, monkeypatch):
    want, _ = _greedy(open_artifact(artifact), "resident")
    monkeypatch.setenv("MODELC_STREAM_BUDGET_MB", "5")  # two layers at a time: every layer streams
    got, eng = _greedy(open_artifact(artifact), "streamed")
    assert got == want
    st = eng.runner.model.stream
    assert st is not None and eng.weights.mode == residency.STREAMED
    assert st.resident_bytes == 0 and st.streamed_bytes > 8 << 20
    # each forward (the prompt, then one per token) read every layer from the file once
    assert st.read_bytes >= len(got) * st.streamed_bytes


def test_a_budget_beyond_the_ring_keeps_the_first_layers_resident(artifact, monkeypatch):
    monkeypatch.setenv("MODELC_STREAM_BUDGET_MB", "10")
    got, eng = _greedy(open_artifact(artifact), "streamed", n=4)
    st = eng.runner.model.stream
    assert 0 < st.resident_bytes and 0 < st.streamed_bytes and st.ring_bytes <= 10 << 20
    # the resident layers were read once; the others once a forward
    assert st.read_bytes < (len(got) + 1) * (st.resident_bytes + st.streamed_bytes)


def test_the_streamer_frees_the_layers_left_and_follows_a_forward_that_skips_some(artifact):
    src = open_artifact(artifact)
    groups = residency.groups(src)
    st = Streamer(src, budget_bytes=5 << 20)  # two layers at a time: the one computing and the next
    spans = {g: spans_of(src, names) for g, names in groups.items()}
    assert all(spans[g] for g in groups)
    for g in (0, 1, 2):
        st.enter(g)
        assert all(_resident_pages(s.addr, s.size) > 0 for s in spans[g])  # read before the forward uses it
        st.leave(g)
    if _evicts(artifact):  # layers 1 and 2 are behind the forward and not due before the next one: freed
        inner = [s for g in (1, 2) for s in spans[g] if s.size > 2 * PAGE]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_resident_pages(s.addr + PAGE, s.size - 2 * PAGE) for s in inner):
            time.sleep(0.05)  # the drops run on their own thread
        assert not any(_resident_pages(s.addr + PAGE, s.size - 2 * PAGE) for s in inner)
    st.enter(0)  # layers 3-5 and the head skipped: the worker drops what it read ahead and reads layer 0
    st.leave(0)
    st.enter(residency.HEAD)
    st.leave(residency.HEAD)
    st.enter(1)
    st.leave(1)
    assert st.read_bytes >= sum(s.size for g in (0, 1, 2, 0, residency.HEAD, 1) for s in spans[g])
    st.close()


def test_a_source_not_on_a_file_streams_nothing(monkeypatch):
    src = make_tiny_llama(0)  # in memory: no file mapping to read from or drop
    assert all(not spans_of(src, names) for names in residency.groups(src).values())
    got, eng = _greedy(src, "streamed", n=3)
    want, _ = _greedy(make_tiny_llama(0), "resident", n=3)
    assert got == want and eng.runner.model.stream.read_bytes == 0
    assert np.isfinite(eng.logits([1, 2, 3])).all()


def test_a_failing_read_leaves_the_forward_to_fault_its_pages_in(artifact, monkeypatch):
    from modelc.models import streaming

    def broken(self, p):
        raise OSError("no reads today")

    monkeypatch.setattr(streaming._Worker, "_read", broken)
    src = open_artifact(artifact)
    st = Streamer(src, budget_bytes=5 << 20)
    for g in (0, 1, residency.HEAD, 0):  # every enter returns: the worker answers without reading
        st.enter(g)
        st.leave(g)
    assert st.read_bytes == 0
    st.close()
