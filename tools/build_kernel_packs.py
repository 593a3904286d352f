"""Build the kernel packs (modelc/kernels/runtime/packs.py): per ISA level, compile the kernels a zoo of models
reaches with the level's CPU name and features pinned, and write modelc/kernels/packs/<level>.tar.zst and
<level>.json. Not run by CI; run it after any change to modelc/kernels/**/*.py (tests/kernels/runtime/
test_packs.py fails while a shipped pack does not match the kernels). Needs a CPU that runs every level's code
(an Intel Xeon with AMX: Sapphire / Emerald Rapids). docs/kernel_packs.md.

    .venv/bin/python tools/build_kernel_packs.py [--levels sapphirerapids,znver4,znver3] [--work DIR]
        [--part I/N] [--write-only] [--models PATH,...]

Each level compiles in subprocesses (NUMBA_CACHE_DIR=WORK/<level>, the level's MODELC_* switches,
MODELC_KERNEL_PACK_BUILD=<level>); --part I/N compiles the I-th of N slices of the zoo only (to split a build
into jobs of a few minutes; the cache folder keeps what earlier parts compiled) and writes nothing;
--write-only packs what WORK/<level> holds. Without either, the whole zoo compiles and the pack is written.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["MODELC_KERNEL_PACKS"] = "0"  # this process only reads the kernels' digest: no pack, no pin here

FIXTURES = ROOT / "tests" / "fixtures" / "models"


def zoo() -> list[tuple[str, str]]:
    """(model path, KV dtype) pairs: every fixture GGUF (the supported architectures and GGUF types), the HF
    variants (float weights), the bundled model; the served default KV type ("auto"), and q8_0 / float32 on
    request for one model; then the embedding encoders ("embed"). Each model: its Runner's warmup() and a 64-token
    prefill of its own (what a served prompt runs, beyond the warm-up's slices)."""
    items = [(str(p), "auto") for p in sorted(FIXTURES.glob("quant/*/*.gguf"))]
    items += [(str(p), "auto") for p in sorted(FIXTURES.glob("variants/*/gguf/*.gguf"))]
    items += [(str(p), "auto") for p in sorted(FIXTURES.glob("variants/*/hf"))]
    default = ROOT / "modelc" / "data" / "default.modelc"
    if default.is_file():
        items.append((str(default), "auto"))
    q4 = FIXTURES / "quant" / "llama" / "model-Q4_0.gguf"
    items += [(str(q4), "q8_0"), (str(q4), "float32")]
    encoders = sorted(p for p in (ROOT / "tests" / "fixtures" / "embeddings").glob("tiny_*") if p.is_dir())
    return items + [(str(p), "embed") for p in encoders]  # /v1/embeddings' BERT-family encoders


_CHILD = r"""
import json, sys, time
from modelc.kernels.runtime import jit_cache, packs
from numba.core import config
done = []
t0 = time.perf_counter()
for path, kv in json.loads(sys.argv[1]):
    from modelc.engine.runner import Runner
    from modelc.source import open_model
    t = time.perf_counter()
    try:
        if kv == "embed":
            from modelc.engine.embedder import Embedder
            Embedder(path).embed_token_ids([[1, 2, 3], [4, 5, 6, 7, 8, 9, 10]])  # two rows: one padded
        else:
            runner = Runner(open_model(path), num_kv_blocks=2, kv_dtype=kv)
            runner.warmup()
            runner._scratch_forward([[i % runner.vocab_size for i in range(64)]], "logits")  # a real prefill
    except Exception as e:  # a model this build cannot run (e.g. an architecture's option): report, go on
        print(f"SKIP {path} {kv}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        continue
    print(f"{time.perf_counter() - t:7.1f} s {path} {kv}", file=sys.stderr, flush=True)
    done.append([path, kv])
print(json.dumps({"cache_key": jit_cache.cache_key(), "cpu_name": config.CPU_NAME, "features": config.CPU_FEATURES,
                  "active": getattr(packs.ACTIVE, "name", None), "svml": bool(config.USING_SVML), "done": done, "seconds": time.perf_counter() - t0}))
"""


def compile_part(level, work: pathlib.Path, items: list[tuple[str, str]]) -> dict:
    from modelc.kernels.runtime import packs

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODELC_NO_", "MODELC_PREFETCH_", "NUMBA_CPU"))}
    env = {k: v for k, v in env.items() if k not in packs.TUNING_ENV and k != packs.ACTIVE_ENV}
    env.update(level.build_env)
    env.update({"NUMBA_CACHE_DIR": str(work / level.name), packs.BUILD_ENV: level.name, "MODELC_REPACK_CACHE": "0",
                "MODELC_HOME": str(work / "home")})  # fmt: skip
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(items)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                         text=True, check=True)  # fmt: skip
    info = json.loads(out.stdout.strip().splitlines()[-1])
    flags = info["cache_key"].rsplit("-", 1)[1]
    if flags != level.flags or info["active"] != level.name:
        raise SystemExit(f"{level.name}: this host built flags {flags!r} (level: {level.flags!r}); not packed")
    if info.get("svml"):  # the code would call Intel's SVML, which a user's numba may not have
        raise SystemExit(f"{level.name}: numba uses SVML here (intel-cmplr-lib-rt installed); build without it")
    record = work / f"{level.name}.build.json"
    try:
        before = json.loads(record.read_text())
    except (OSError, ValueError):
        before = None
    if before is not None and before["cache_key"] == info["cache_key"]:  # an earlier part of the same build
        info["done"] = before["done"] + [d for d in info["done"] if d not in before["done"]]
        info["seconds"] += before["seconds"]
    record.write_text(json.dumps(info))
    return info


def _shown(path: str) -> str:
    p = pathlib.Path(path)
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def write_pack(level, work: pathlib.Path, out_dir: pathlib.Path) -> dict:
    import zstandard

    from modelc.kernels.runtime import jit_cache, packs

    info = json.loads((work / f"{level.name}.build.json").read_text())
    if info["cache_key"].split("-")[:-1] != jit_cache.cache_key().split("-")[:-1]:
        raise SystemExit(f"{level.name}: compiled for {info['cache_key']}, the kernels are now {jit_cache.cache_key()}")
    folder = work / level.name / info["cache_key"]
    files = sorted(p for p in folder.iterdir() if p.suffix in (".nbi", ".nbc") and p.is_file())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in files:
            data = p.read_bytes()
            ti = tarfile.TarInfo(p.name)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            tar.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    packed = zstandard.ZstdCompressor(level=19, threads=-1).compress(raw)
    pack, manifest_path = packs.pack_paths(level, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": packs.FORMAT, "level": level.name, "flags": level.flags, "cache_key": info["cache_key"],
        **packs.versions(), "cpu_name": info["cpu_name"], "features": info["features"],
        "digest": hashlib.sha256(packed).hexdigest(), "files": len(files), "raw_bytes": len(raw),
        "bytes": len(packed), "built": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "build_s": round(info["seconds"]), "zoo": [f"{_shown(p)} {kv}" for p, kv in info["done"]],
    }  # fmt: skip
    for path, data in ((pack, packed), (manifest_path, json.dumps(manifest, indent=1).encode() + b"\n")):
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return manifest


def packs_by_name(packs) -> dict:
    return {lv.name: lv for lv in packs.LEVELS}


def main(argv: list[str] | None = None) -> int:
    from modelc.kernels.runtime import packs

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default=",".join(lv.name for lv in packs.LEVELS))
    ap.add_argument("--work", default=str(pathlib.Path(tempfile.gettempdir()) / "modelc-kernel-packs"))
    ap.add_argument("--part", default=None, help="I/N: compile the I-th of N slices of the zoo, write nothing")
    ap.add_argument("--write-only", action="store_true", help="pack what --work holds")
    ap.add_argument("--models", default="", help="extra model paths for the zoo (comma-separated)")
    ap.add_argument("--out", default=str(packs.PACKS_DIR))
    ap.add_argument(
        "--drop",
        default="",
        help="remove these levels' packs (comma-separated): for a host that cannot run a level's code after a kernel "
        "edit; those CPUs then compile on first start, as where no level applies",
    )
    args = ap.parse_args(argv)
    if args.drop:
        for name in args.drop.split(","):
            for path in packs.pack_paths(packs_by_name(packs)[name], pathlib.Path(args.out)):
                path.unlink(missing_ok=True)
            print(f"{name}: pack removed")
        return 0
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    by_name = {lv.name: lv for lv in packs.LEVELS}
    items = zoo() + [(p, "auto") for p in args.models.split(",") if p]
    if args.part:
        i, n = (int(x) for x in args.part.split("/"))
        items = items[i - 1 :: n]
    for name in args.levels.split(","):
        level = by_name[name]
        t0 = time.perf_counter()
        if not args.write_only:
            info = compile_part(level, work, items)
            print(f"{name}: {len(items)} models in {time.perf_counter() - t0:.0f} s ({len(info['done'])} in the build)")
        if args.part is None:
            m = write_pack(level, work, pathlib.Path(args.out))
            print(
                f"{name}: {m['files']} files, {m['raw_bytes'] / 1e6:.1f} MB -> {m['bytes'] / 1e6:.2f} MB, "
                f"{len(m['zoo'])} models, compiled in {m['build_s']} s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
