"""Kernel packs (kernels/runtime/packs.py): which level a host gets, which pack fits, the merge into the user's
cache, that the shipped packs match the kernels, and a fixture model that loads every kernel from a pack into an
empty cache with compiling refused and decodes the JIT path's tokens."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import subprocess
import sys
import tarfile

import pytest
import zstandard

from modelc import tmpfiles
from modelc.kernels.runtime import cpu, jit_cache, packs

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPR, ZEN4, ZEN3, ICX, ADL = packs.LEVELS
ALL = {n: True for lv in packs.LEVELS for n in lv.plus}


def test_a_host_gets_the_level_of_its_flags_and_features():
    assert packs.select(SPR.flags, ALL) is SPR
    assert packs.select(ZEN4.flags, {n: True for n in ZEN4.plus}) is ZEN4
    assert packs.select(ZEN3.flags, {n: True for n in ZEN3.plus}) is ZEN3
    assert packs.select(ICX.flags, {n: True for n in ICX.plus}) is ICX
    assert packs.select(ADL.flags, {n: True for n in ADL.plus}) is ADL
    assert packs.select("avx2.vnni.avx512_vnni.prefetch_t1", ALL) is None  # Cascade Lake: no level has its paths
    assert packs.select("portable", {}) is None


def test_a_level_needs_every_feature_it_turns_on():
    """A VM that masks a feature the level's code uses (AMX's bf16 tiles here, F16C for Zen 3) gets no pack, even
    where cpu.py's flags match."""
    assert packs.select(SPR.flags, {**ALL, "amx-bf16": False}) is None
    assert packs.select(ZEN3.flags, {**{n: True for n in ZEN3.plus}, "f16c": False}) is None
    assert packs.select(ADL.flags, {**{n: True for n in ADL.plus}, "avxvnni": False}) is None  # VNNI via AVX-512 only


def test_the_features_string_turns_on_the_level_last_and_every_other_feature_off():
    s = packs.features_string(ZEN3, ["avx512f", "avx2", "sse4a", "fma"]).split(",")
    assert s[:2] == ["-avx512f", "-sse4a"] and "+avx2" in s and "+fma" in s and "-avx2" not in s
    assert s.index("+avx2") > s.index("-sse4a")


def _manifest(level, key, vers, **over):
    return {"format": packs.FORMAT, "level": level.name, "flags": level.flags, "cache_key": key, **vers,
            "features": "+avx2", "cpu_name": level.cpu_name, **over}  # fmt: skip


def test_a_manifest_for_another_build_means_no_pack():
    vers = {"python": "cp311", "numba": "0.68.1", "llvmlite": "0.50.0"}
    key = f"0.1.0-abcdef012345-{ZEN4.flags}"
    assert packs.manifest_ok(_manifest(ZEN4, key, vers), ZEN4, key, vers)
    assert not packs.manifest_ok(_manifest(ZEN4, key, vers), SPR, key, vers)  # another level
    for k, v in (("python", "cp312"), ("numba", "0.61.0"), ("llvmlite", "0.44.0")):
        assert not packs.manifest_ok(_manifest(ZEN4, key, vers), ZEN4, key, {**vers, k: v})
    assert not packs.manifest_ok(_manifest(ZEN4, key, vers), ZEN4, key.replace("abcdef", "fedcba"), vers)  # kernels
    assert not packs.manifest_ok(_manifest(ZEN4, key, vers), ZEN4, key.replace("0.1.0", "0.2.0"), vers)  # version
    assert not packs.manifest_ok(_manifest(ZEN4, key, vers, features=""), ZEN4, key, vers)


def _index(folder: pathlib.Path, base: str, stamp: str, entries: dict) -> None:
    """An index and its data files, written by numba's own IndexDataCacheFile (key -> data bytes)."""
    from numba.core.caching import IndexDataCacheFile

    f = IndexDataCacheFile(str(folder), base, stamp)
    for k, data in entries.items():
        f.save(k, data)


def _load(folder: pathlib.Path, base: str, stamp: str, k):
    from numba.core.caching import IndexDataCacheFile

    return IndexDataCacheFile(str(folder), base, stamp).load(k)


def _pack(src: pathlib.Path, out: pathlib.Path, level) -> dict:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in sorted(src.iterdir()):
            tar.add(p, arcname=p.name)
    data = zstandard.ZstdCompressor().compress(buf.getvalue())
    pack, _ = packs.pack_paths(level, out)
    out.mkdir(exist_ok=True)
    pack.write_bytes(data)
    return {"digest": hashlib.sha256(data).hexdigest()}


def test_extraction_merges_indexes_once_and_keeps_the_users_overloads(tmp_path):
    src, out, dest = tmp_path / "src", tmp_path / "out", tmp_path / "dest"
    src.mkdir(), dest.mkdir()
    _index(src, "f-10.py311", "S", {("sig1", "m"): "pack one", ("sig2", "m"): "pack two"})
    _index(src, "g-20.py311", "S", {("sig1", "m"): "pack g"})
    manifest = _pack(src, out, ZEN3)
    _index(dest, "f-10.py311", "S", {("mine", "m"): "user's", ("sig1", "m"): "user's sig1"})  # the user's own
    assert packs.extract(ZEN3, manifest, dest, out) == 2  # f: sig2 (sig1 is the user's); g: sig1
    assert _load(dest, "f-10.py311", "S", ("mine", "m")) == "user's"
    assert _load(dest, "f-10.py311", "S", ("sig1", "m")) == "user's sig1"
    assert _load(dest, "f-10.py311", "S", ("sig2", "m")) == "pack two"
    assert _load(dest, "g-20.py311", "S", ("sig1", "m")) == "pack g"
    names = sorted(p.name for p in dest.iterdir())
    assert not [n for n in names if ".tmp." in n or n.endswith(tmpfiles.SUFFIX)]  # every file went in by rename
    assert names.count("f-10.py311.3.nbc") == 1  # after the user's .1 and .2
    before = {p.name: p.read_bytes() for p in dest.iterdir() if p.is_file()}
    assert packs.extract(ZEN3, manifest, dest, out) == 0  # once
    assert {p.name: p.read_bytes() for p in dest.iterdir() if p.is_file()} == before


def test_a_stale_index_in_the_users_folder_is_replaced_and_a_bad_pack_writes_nothing(tmp_path):
    src, out, dest = tmp_path / "src", tmp_path / "out", tmp_path / "dest"
    src.mkdir(), dest.mkdir()
    _index(src, "f-10.py311", "S", {("sig1", "m"): "pack one"})
    manifest = _pack(src, out, ZEN4)
    with pytest.raises(ValueError):
        packs.extract(ZEN4, {"digest": "0" * 64}, dest, out)
    assert not list(dest.glob("*.nb?")) and not list(dest.glob(".pack-*"))
    _index(dest, "f-10.py311", "OLD", {("sig1", "m"): "stale"})  # another source stamp: numba ignores it
    assert packs.extract(ZEN4, manifest, dest, out) == 1
    assert _load(dest, "f-10.py311", "S", ("sig1", "m")) == "pack one"


def test_kinds_token_names_every_kind_where_a_pack_applies(monkeypatch):
    from modelc.kernels.layer import decode_layer as dl

    monkeypatch.setattr(packs, "ACTIVE", None)
    one = dl.kinds_token([(dl.R16, 2)])
    assert one.dtype.names == ("r16_2",)
    monkeypatch.setattr(packs, "ACTIVE", ZEN3)
    assert list(dl.kinds_token([(dl.R16, 2)]).dtype.names) == dl.ALL_KINDS
    assert dl.kinds_token([(dl.NONE, 0)]).dtype.names == ("none",)


def _shipped() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(packs.PACKS_DIR.glob("*.json"))]


def test_the_shipped_packs_match_the_kernels():
    """A kernel edit without `tools/build_kernel_packs.py` (docs/kernel_packs.md) fails here: every shipped
    pack's manifest must name the current modelc version and kernels' digest, and its level's flags."""
    shipped = _shipped()
    assert shipped, "no kernel pack shipped"
    version, digest = jit_cache.cache_key().split("-")[:2]
    by_name = {lv.name: lv for lv in packs.LEVELS}
    for m in shipped:
        assert m["cache_key"] == f"{version}-{digest}-{by_name[m['level']].flags}", (
            f"{m['level']}: the pack was built for {m['cache_key']}; rebuild: tools/build_kernel_packs.py (a host "
            f"that cannot run the level's code: tools/build_kernel_packs.py --drop {m['level']}; docs/kernel_packs.md)"
        )
        pack = packs.pack_paths(by_name[m["level"]])[0]
        assert hashlib.sha256(pack.read_bytes()).hexdigest() == m["digest"]
        assert m["format"] == packs.FORMAT  # (its Python, numba and llvmlite: where they differ it does not apply)


_PROBE = """
import sys
sys.path.insert(0, sys.argv[2])
from numba.core import event
from modelc.kernels.runtime import packs
n = []
class L(event.Listener):
    def on_start(self, ev): n.append(getattr(getattr(ev.data.get("dispatcher"), "py_func", None), "__qualname__", "?"))
    def on_end(self, ev): pass
event.register("numba:compile", L())
from modelc.engine import warm
from modelc.engine.runner import Runner
from modelc.kernels.runtime.nocompile import load_only
from modelc.source import open_model
from tests.engine.test_runner import _generate
if packs.ACTIVE is None or packs.ACTIVE.name != sys.argv[3]:  # another level, or none (a host with no level)
    print("PACK", packs.ACTIVE and packs.ACTIVE.name, packs.REASON)
    sys.exit(0)
with load_only():
    runner = Runner(open_model(sys.argv[1]), num_kv_blocks=16, kv_dtype="auto")
loaded = warm.loaded_from_cache(runner)
print("PACK", packs.ACTIVE and packs.ACTIVE.name, "LOADED", loaded, "COMPILES", n,
      "TOKENS", _generate(runner, 1, [5, 17, 3, 88, 41, 9, 60], 6, [0, 1]))
"""


@pytest.mark.parametrize("level", packs.LEVELS, ids=lambda lv: lv.name)
def test_a_fixture_model_from_an_empty_cache_loads_every_kernel_from_the_pack(level, tmp_path):
    """A child process with an empty kernel cache and the level's flags (its build switches: an AMX Xeon runs every
    level's code) loads every kernel the model reaches from the pack, compiling refused, and compiles nothing while
    it decodes; on the host's own level, the same greedy tokens as this process (the JIT path)."""
    manifest = packs.read_manifest(level)
    version, digest = jit_cache.cache_key().split("-")[:2]
    if manifest is None or not packs.manifest_ok(
        manifest, level, f"{version}-{digest}-{level.flags}", packs.versions()
    ):
        pytest.skip(f"no current pack for {level.name} (test_the_shipped_packs_match_the_kernels)")
    own = packs.select(jit_cache.cache_key().rsplit("-", 1)[1], cpu.FEATURES) is level
    model = ROOT / "tests" / "fixtures" / "models" / "quant" / "llama" / "model-Q4_K_M.gguf"
    drop = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", packs.ACTIVE_ENV, packs.SWITCH_ENV, "MODELC_KERNEL_PACKS_DIR")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("MODELC_NO_", "MODELC_PREFETCH"))}
    env.update({"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "MODELC_REPACK_CACHE": "0", **level.build_env})
    out = subprocess.run([sys.executable, "-c", _PROBE, str(model), str(ROOT), level.name], capture_output=True, text=True,
                         env=env, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    if f"PACK {level.name} " not in out.stdout:
        assert not own, f"the host's own level's pack did not apply: {out.stdout}"
        pytest.skip(f"this host does not run {level.name}'s code with its switches: {out.stdout[:200]}")
    assert "LOADED True COMPILES [] TOKENS" in out.stdout, out.stdout
    if own:
        from modelc.engine.runner import Runner
        from modelc.source import open_model
        from tests.engine.test_runner import _generate

        runner = Runner(open_model(model), num_kv_blocks=16, kv_dtype="auto")
        want = _generate(runner, 1, [5, 17, 3, 88, 41, 9, 60], 6, [0, 1])
        assert f"TOKENS {want}" in out.stdout, out.stdout
