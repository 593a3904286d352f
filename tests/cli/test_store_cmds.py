from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from modelc import store
from modelc.artifact import open_artifact, write_artifact
from modelc.artifact.tiny import make_model
from modelc.cli.main import main
from modelc.models.tiny import make_tiny_llama

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def runnable_model():
    """A complete tiny llama: pack refuses models their architecture cannot load (artifact/structure.py)."""
    m = make_tiny_llama(0)
    m.name = "tiny"
    return m


@pytest.fixture
def src(tmp_path):
    return write_artifact(make_model(), tmp_path / "src.modelc")


@pytest.fixture
def runnable(tmp_path):
    return write_artifact(runnable_model(), tmp_path / "runnable.modelc")


def run(capsys, *argv):
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_a_compress_level_needs_zstd_and_a_zstd_level(home, runnable, capsys):
    """--compress-level without --compress zstd was ignored (the file written uncompressed); out of 1-22 it failed
    deep in the writer. Both are usage errors now, and nothing is packed."""
    for argv in (["--compress-level", "9"], ["--compress", "none", "--compress-level", "9"],
                 ["--compress", "zstd", "--compress-level", "0"], ["--compress", "zstd", "--compress-level", "23"]):  # fmt: skip
        code, _, err = run(capsys, "pack", runnable, "--name", "tiny", *argv)
        assert code == 2 and "--compress-level" in err, (argv, err)
    assert not store.exists("tiny")


def test_pack_list_switch_rm_cycle(home, runnable, capsys):
    assert run(capsys, "pack", runnable, "--name", "team/tiny")[0] == 0
    code, out, _ = run(capsys, "pack", runnable, "--name", "team/tiny", "--compress", "zstd", "--compress-level", "9")
    assert code == 0 and "team/tiny.modelc" in out
    code, out, _ = run(capsys, "list", "--json")
    rows = json.loads(out)
    assert [(r["name"], r["version"], r["active"]) for r in rows] == [("team/tiny", 1, False), ("team/tiny", 2, True)]
    assert rows[0]["architecture"] == "llama" and rows[0]["num_params"] == runnable_model().num_params
    code, out, _ = run(capsys, "list")
    assert code == 0 and "team/tiny" in out and "v2*" in out
    assert run(capsys, "switch", "team/tiny", "1")[0] == 0
    assert store.active_version("team/tiny") == 1
    code, _, err = run(capsys, "rm", "team/tiny")
    assert code == 1 and err.startswith("error: ") and "--all" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "rm", "team/tiny", "--all")
    assert code == 0 and out.count("removed") == 2 and not store.exists("team/tiny")


def test_cp_and_errors(home, src, capsys):
    assert run(capsys, "cp", src, "a")[0] == 0
    code, _, err = run(capsys, "cp", "a", "a")
    assert code == 1 and "already exists" in err
    code, _, err = run(capsys, "switch", "a", "5")
    assert code == 1 and "no version 5" in err
    code, _, err = run(capsys, "rm", "ghost")
    assert code == 1 and "not in the store" in err


def test_inspect_text_json_and_quant_sizes(home, src, capsys):
    code, out, _ = run(capsys, "inspect", src)
    assert code == 0 and "llama" in out and "modelc (from safetensors)" in out
    assert "weights under `modelc run` here: resident (fits" in out  # models/residency.py's choice, and why
    names = [line.split()[0] for line in out.splitlines() if line.startswith(("empty", "model."))]
    assert names == sorted(make_model().tensors)
    code, out, _ = run(capsys, "inspect", src, "--json")
    info = json.loads(out)
    assert info["num_params"] == make_model().num_params and info["tensors"][1]["dtype"] == "F32"
    assert info["weights"]["mode"] == "resident" and info["weights"]["weights_bytes"] > 0
    code, out, _ = run(capsys, "inspect", src, "--quant-sizes", "--json")
    sizes = json.loads(out)["sizes_bytes"]
    assert sizes["fp16"] <= sizes["fp32"]  # norms and embeddings stay as stored (pack's rules)
    assert sizes["q4_0"] <= sizes["q8_0"] <= sizes["fp16"]
    code, out, _ = run(capsys, "inspect", src, "--quant-sizes")
    assert code == 0 and "q4_0" in out and "%" in out


def test_inspect_json_is_strict_with_non_finite_metadata(home, tmp_path, capsys):
    """A NaN or inf in a model's metadata made --json print bare NaN/Infinity, which strict parsers (jq,
    JavaScript, json.loads with parse_constant) refuse; they are now the strings the text output shows."""
    m = make_model()
    m.metadata.update({"x.nan": float("nan"), "x.inf": float("inf"), "x.list": [1.5, float("-inf")]})
    path = write_artifact(m, tmp_path / "nan.modelc")
    code, out, _ = run(capsys, "inspect", path, "--json")

    def refuse(name):
        raise AssertionError(f"not strict JSON: {name}")

    meta = json.loads(out, parse_constant=refuse)["metadata"]
    assert code == 0 and (meta["x.nan"], meta["x.inf"], meta["x.list"]) == ("NaN", "Infinity", [1.5, "-Infinity"])
    code, out, _ = run(capsys, "inspect", path)
    assert "x.nan: NaN" in out and "x.list: [1.5, -Infinity]" in out


def test_verify_ok_and_corrupt(home, src, capsys):
    code, out, _ = run(capsys, "verify", src)
    assert code == 0 and out.startswith("ok:")
    entry = open_artifact(src).entries["model.embed_tokens.weight"]
    buf = bytearray(open(src, "rb").read())
    buf[entry.offset + 7] ^= 1
    open(src, "wb").write(bytes(buf))
    code, _, err = run(capsys, "verify", src)
    assert code == 1 and "model.embed_tokens.weight" in err and err.count("\n") == 1


def test_pack_chat_template_override(home, runnable, tmp_path, capsys):
    good = tmp_path / "t.jinja"
    good.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    code, out, _ = run(capsys, "pack", runnable, "-o", str(tmp_path / "o.modelc"), "--chat-template", str(good))
    assert code == 0 and open_artifact(tmp_path / "o.modelc").chat_template == good.read_text()
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}")
    code, _, err = run(capsys, "pack", runnable, "-o", str(tmp_path / "p.modelc"), "--chat-template", str(bad))
    assert code == 1 and "does not compile" in err and not (tmp_path / "p.modelc").exists()


def test_pack_arch_override_and_unknown(home, runnable, tmp_path, capsys):
    for arch in ("qwen2", "qwen3", "gemma2", "mixtral"):  # every family modelc serves, not a stale subset
        out = tmp_path / f"{arch}.modelc"
        assert run(capsys, "pack", runnable, "-o", str(out), "--arch", arch)[0] == 0
        assert open_artifact(out).architecture == arch
    code, _, err = run(capsys, "pack", runnable, "-o", str(tmp_path / "x.modelc"), "--arch", "nope")
    assert code == 1 and "unknown architecture" in err


def test_export_both_formats(home, src, tmp_path, capsys):
    for fmt in ("safetensors", "gguf"):
        code, out, _ = run(capsys, "export", src, "--to", fmt, "-o", str(tmp_path / f"m.{fmt}"))
        assert code == 0 and (tmp_path / f"m.{fmt}").stat().st_size > 0
    code, _, err = run(capsys, "export", src, "--to", "onnx", "-o", str(tmp_path / "m.onnx"))
    assert code == 1 and "cannot export" in err


def test_every_command_has_help_with_example(capsys):
    for cmd in ("inspect", "pack", "list", "rm", "cp", "switch", "verify", "export"):
        code, out, _ = run(capsys, cmd, "--help")
        assert code == 0 and "Example: modelc " + cmd in " ".join(out.split())


@pytest.mark.parametrize("argv", [["verify", "/nonexistent/x.modelc"], ["inspect", "no-such-model"]])
def test_subprocess_one_line_error(home, argv):
    env = {**os.environ, "MODELC_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "modelc", *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_pack_safetensors_with_prune_and_quantize(home, tmp_path, capsys):
    from modelc.formats.export_safetensors import export_safetensors
    from modelc.models.tiny import make_tiny_llama

    src = export_safetensors(make_tiny_llama(), tmp_path / "llama.safetensors")
    code, out, _ = run(capsys, "pack", src, "--name", "tl", "--prune", "0.05", "--quantize", "q8_0", "--source-hash")
    assert code == 0
    pruned = int(out.split("pruned ")[1].split(" of ")[0].replace(",", ""))
    assert pruned > 0 and "quantized 14 tensors to q8_0" in out
    art = open_artifact(store.resolve("tl"), verify=True)
    assert art.tensors["model.layers.0.mlp.up_proj.weight"].dtype.value == "Q8_0"
    assert art.provenance["source_format"] == "safetensors" and len(art.provenance["source_sha256"]) == 64
    code, _, _ = run(capsys, "pack", src, "--name", "tl2", "--no-source-hash")  # the old flag: the default now
    assert code == 0 and "source_sha256" not in open_artifact(store.resolve("tl2")).provenance
    code, _, _ = run(capsys, "pack", src, "--name", "tl3")
    prov = open_artifact(store.resolve("tl3")).provenance
    assert code == 0 and "source_sha256" not in prov and prov["source_bytes"] == os.path.getsize(src)
    code, _, err = run(capsys, "pack", src, "--name", "tl", "--quantize", "q9")
    assert code == 1 and "unknown quantization" in err and store.versions("tl") == []


def test_pack_q4_k_says_per_tensor_what_short_rows_were_stored_as(home, tmp_path, capsys):
    from modelc.formats.export_safetensors import export_safetensors
    from modelc.models.tiny import make_tiny_llama

    src = export_safetensors(make_tiny_llama(), tmp_path / "llama.safetensors")  # C=64, F=128: not 256-blocks
    code, out, _ = run(capsys, "pack", src, "--name", "k4", "--quantize", "q4_k")
    assert code == 0 and "quantized 14 tensors to q4_k" in out
    art = open_artifact(store.resolve("k4"))
    lines = [ln.strip() for ln in out.splitlines() if "stored as" in ln]
    assert len(lines) == 14
    for ln in lines:
        name, used = ln.split(": stored as ")[0], ln.split(": stored as ")[1].split()[0]
        assert art.tensors[name].dtype.value == used.upper()  # what it says is what it stored


def test_quant_sizes_equal_what_pack_writes(tmp_path):
    """F32 embeddings and head, F32 norms, short-row fallbacks and int scales: the preview is exact."""
    from modelc.artifact import write_artifact
    from modelc.cli.store_cmds import quant_sizes
    from modelc.models.tiny import make_tiny_llama
    from modelc.pack import pack

    src = tmp_path / "llama.modelc"
    write_artifact(make_tiny_llama(0), src)
    preview = quant_sizes(open_artifact(src))
    for name, kind in (("fp16", "f16"), ("int8", "int8"), ("int4", "int4"), ("q4_0", "q4_0"), ("q4_k", "q4_k")):
        art = open_artifact(pack(src, out=tmp_path / f"{kind}.modelc", quantize=kind))
        assert preview[name] == sum(t.nbytes for t in art.tensors.values()), name


def test_default_resolves_in_every_command_that_takes_a_model(tmp_path, monkeypatch, capsys) -> None:
    """A fresh install (empty store): `default` is the bundled model for inspect, verify, cp, pack, run's
    resolver and the build commands' (compile, containerize: store.resolve)."""
    from modelc.daemon.launch import serve_target

    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "fresh"))
    if not store.bundled_default_path().is_file():
        pytest.skip("the bundled default model is not in this checkout")
    assert main(["inspect", "default"]) == 0 and "default" in capsys.readouterr().out
    assert main(["verify", "default"]) == 0
    assert main(["cp", "default", "mine"]) == 0
    assert serve_target("default")[0] == store.bundled_default_path()
    assert store.resolve("default") == store.bundled_default_path()
    requantized = tmp_path / "q8.modelc"
    assert main(["pack", "default", "-o", str(requantized), "--quantize", "q8_0"]) == 0
    assert open_artifact(requantized).name == open_artifact(store.bundled_default_path()).name
    assert main(["pack", "mine", "--name", "mine-q8", "--quantize", "q8_0"]) == 0  # any stored model
    assert store.lookup("mine-q8").is_file()
    capsys.readouterr()
    assert main(["pack", "no-such-model", "-o", str(tmp_path / "x.modelc")]) == 1
    assert "no-such-model is not in the store" in capsys.readouterr().err
