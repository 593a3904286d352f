"""sha256_ni: the SHA-NI kernel (one and two messages per loop) against hashlib, and its fallback."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from modelc.kernels import sha256_ni as S

LENGTHS = [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, (1 << 20) + 7]


def blob(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("n", LENGTHS)
def test_one_message_equals_hashlib(n):
    data = blob(n, n)
    h = S.Sha256()
    h.update(data)
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    assert S.Sha256(data).digest() == hashlib.sha256(data).digest()


def test_split_updates_of_every_shape():
    data = blob(5000, 1)
    want = hashlib.sha256(data).hexdigest()
    for cuts in ([1, 63, 64, 65], [55, 56], [64, 128, 4000], [3] * 30, [4999]):
        h, pos = S.Sha256(), 0
        for c in cuts:
            h.update(data[pos : pos + c])
            pos += c
        h.update(np.frombuffer(data[pos:], np.uint8))  # numpy input too
        assert h.hexdigest() == want


@pytest.mark.parametrize(("na", "nb"), [(0, 0), (0, 200), (64, 64), (55, 1000), ((1 << 20) + 7, 300_001), (4096, 63)])
def test_pair_equals_two_hashlibs(na, nb):
    a, b = blob(na, 2), blob(nb, 3)
    ha, hb = S.Sha256(), S.Sha256()
    S.update_pair(ha, a[:100], hb, b[:33])  # unaligned heads: each lane keeps its own partial block
    S.update_pair(ha, a[100:], hb, b[33:])
    assert ha.hexdigest() == hashlib.sha256(a).hexdigest()
    assert hb.hexdigest() == hashlib.sha256(b).hexdigest()


def test_pair_of_the_same_buffer_and_digest_is_repeatable():
    a = blob(10_000, 4)
    ha, hb = S.Sha256(), S.Sha256()
    S.update_pair(ha, a, hb, a)
    assert ha.hexdigest() == hb.hexdigest() == hashlib.sha256(a).hexdigest()
    assert ha.hexdigest() == ha.hexdigest()  # digest does not change the state
    ha.update(b"more")
    assert ha.hexdigest() == hashlib.sha256(a + b"more").hexdigest()


def test_kernel_is_used_on_this_host():
    """Where the CPU has SHA-NI the compiled path must be the one tested above."""
    from llvmlite import binding

    if os.environ.get("MODELC_NO_SHANI") or not binding.get_host_cpu_features().get("sha"):
        pytest.skip("no SHA-NI here")
    assert S.HAS_SHANI and S.Sha256()._fallback is None


_FALLBACK_CHECK = """
import hashlib
from modelc.kernels import sha256_ni as S
assert not S.HAS_SHANI and S.Sha256()._fallback is not None
a, b = b"x" * 1000, b"y" * 77
ha, hb = S.Sha256(), S.Sha256()
S.update_pair(ha, a, hb, b)
assert ha.hexdigest() == hashlib.sha256(a).hexdigest() and hb.hexdigest() == hashlib.sha256(b).hexdigest()
print("fallback ok")
"""


def test_fallback_without_shani():
    env = dict(os.environ, MODELC_NO_SHANI="1")
    p = subprocess.run([sys.executable, "-c", _FALLBACK_CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "fallback ok" in p.stdout, p.stderr
