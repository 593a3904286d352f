"""End to end: the real CLI as subprocesses against a daemon started by `modelc run --detach`
(a tiny random llama packed in the test): run, ps, generate, chat from stdin, load/unload of a
second model, the Ollama-shaped NDJSON API, stop (pid gone, daemon.json removed)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from modelc.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(home: Path, *args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELC_HOME": str(home), **(env or {})}
    full_env.pop("MODELC_HOST", None) if "MODELC_HOST" not in (env or {}) else None
    return subprocess.run(
        [sys.executable, "-m", "modelc", *args], cwd=ROOT, env=full_env, input=stdin, capture_output=True,
        text=True, timeout=180,
    )  # fmt: skip


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def make_store(home: Path, monkeypatch) -> None:
    from modelc import store
    from modelc.artifact.writer import write_artifact
    from tests.server.tiny_model import make_served_model

    monkeypatch.setenv("MODELC_HOME", str(home))
    store.add("tiny", lambda tmp: write_artifact(make_served_model(0), tmp))
    store.add("tiny2", lambda tmp: write_artifact(make_served_model(1), tmp))


def save_adapter(path: Path) -> None:
    """PEFT-named random lora_A/lora_B for the tiny llama's q and down projections (C=64, F=128)."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(7)
    tensors = {}
    for i in (0, 1):
        for mod, proj, out_dim, in_dim in (("self_attn", "q", 64, 64), ("mlp", "down", 64, 128)):
            base = f"base_model.model.model.layers.{i}.{mod}.{proj}_proj"
            tensors[base + ".lora_A.weight"] = (rng.standard_normal((4, in_dim)) * 0.3).astype(np.float32)
            tensors[base + ".lora_B.weight"] = (rng.standard_normal((out_dim, 4)) * 0.3).astype(np.float32)
    save_file(tensors, str(path))


def test_no_daemon_is_one_line_error(tmp_path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = cli(tmp_path, "ps", env={"MODELC_HOST": url})
    assert r.returncode == 1
    assert r.stderr.strip() == f"error: no modelc daemon at {url}; start one with `modelc run --detach`"


def test_no_daemon_recorded(tmp_path) -> None:
    """Nothing in $MODELC_HOME: stop says so and fails, ps shows nothing; no port is guessed."""
    stop = cli(tmp_path, "stop")
    assert stop.returncode == 1 and "no modelc daemon is recorded" in stop.stderr
    ps = cli(tmp_path, "ps")
    assert ps.returncode == 0 and "no daemon running" in ps.stdout
    public = cli(tmp_path, "run", "--bind", "0.0.0.0", "--port", "0")  # refused before anything loads
    assert public.returncode == 1 and "without --api-key" in public.stderr and "--insecure-no-auth" in public.stderr


def test_max_tokens_below_one_is_a_usage_error(tmp_path, monkeypatch, capsys) -> None:
    """`-n 0` reached /api/generate as num_predict 0, which Ollama (and now modelc) reads as no limit: a
    user asking for at most 0 tokens got up to 2048. The flag is "at most N" (default: the server's)."""
    monkeypatch.setenv("MODELC_HOST", f"http://127.0.0.1:{free_port()}")  # never reached
    for argv in (["generate", "tiny", "hi", "-n", "0"], ["chat", "tiny", "--max-tokens", "-1"]):
        assert main(argv) == 2
        assert "--max-tokens" in capsys.readouterr().err


def test_help_has_examples(capsys) -> None:
    for cmd in (["ps"], ["chat"], ["generate"], ["load"], ["unload"], ["stop"], ["lora", "load"], ["lora", "unload"]):
        main([*cmd, "--help"])
        assert "Example: modelc" in capsys.readouterr().out, cmd
    main(["run", "--help"])
    text = capsys.readouterr().out
    assert "--detach" in text and "--keep-alive" in text and "--max-loaded-models" in text


def test_daemon_end_to_end(tmp_path, monkeypatch) -> None:
    make_store(tmp_path, monkeypatch)
    port = free_port()
    r = cli(tmp_path, "run", "tiny", "--detach", "--port", str(port), "--kv-cache-mb", "8", "--threads", "1",
            "--max-tokens", "6", "--temperature", "0")  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    pid = int(r.stdout.split("pid ")[1].split(")")[0])
    url = f"http://127.0.0.1:{port}"
    try:
        assert url in r.stdout
        state = json.loads((tmp_path / "daemon.json").read_text())
        assert state["pid"] == pid and state["url"] == url and len(state["token"]) >= 32
        assert (tmp_path / "daemon.json").stat().st_mode & 0o777 == 0o600
        # browser safety and control routes on the real daemon (no API key: the default)
        with httpx.Client(base_url=url, timeout=30) as raw:
            assert raw.post("/api/shutdown").status_code == 403  # no control token
            assert raw.post("/api/copy", json={"source": "tiny", "destination": "x"}).status_code == 403
            page = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
            assert raw.post("/api/shutdown", content=b"{}", headers=page).status_code == 403
            assert raw.get("/api/tags", headers={"Host": "evil.example"}).status_code == 403  # DNS rebinding
            leak = raw.post("/api/show", json={"model": "/etc/passwd"})
            assert leak.status_code == 404 and "root" not in leak.text
        again = cli(tmp_path, "run", "tiny", "--detach", "--port", str(free_port()))
        assert again.returncode == 1 and "already runs" in again.stderr

        ps = cli(tmp_path, "ps")
        assert ps.returncode == 0 and "tiny (default)" in ps.stdout and "forever" in ps.stdout

        opts = {"num_predict": 4, "temperature": 0}
        with httpx.Client(base_url=url, timeout=120) as http:
            want = http.post("/api/generate", json={"model": "tiny", "prompt": "hello", "stream": False,
                                                    "options": opts}).json()  # fmt: skip
            gen = cli(tmp_path, "generate", "tiny", "hello", "-n", "4", "-t", "0")
            assert gen.returncode == 0, gen.stderr
            assert gen.stdout == want["response"] + "\n" and want["eval_count"] == 4

            # chat from stdin: one turn per line, history kept
            msgs = [{"role": "user", "content": "hi"}]
            r1 = http.post("/api/chat", json={"model": "tiny", "messages": msgs, "stream": False, "options": opts})
            msgs += [r1.json()["message"], {"role": "user", "content": "more"}]
            lines = []
            with http.stream("POST", "/api/chat", json={"model": "tiny", "messages": msgs, "options": opts}) as s:
                assert s.headers["content-type"].startswith("application/x-ndjson")
                lines = [json.loads(x) for x in s.iter_lines() if x.strip()]
            assert lines[-1]["done"] and all(not x["done"] for x in lines[:-1])
            r2 = "".join(x["message"]["content"] for x in lines)
            chat = cli(tmp_path, "chat", "tiny", "-n", "4", "-t", "0", stdin="hi\n\nmore\n")
            assert chat.returncode == 0, chat.stderr
            assert chat.stdout == r1.json()["message"]["content"] + "\n" + r2 + "\n"

            # a second model: load, use, unload
            assert cli(tmp_path, "load", "tiny2").returncode == 0
            ps = http.get("/api/ps").json()["models"]
            assert [m["name"] for m in ps] == ["tiny", "tiny2"]
            for m in ps:
                assert m["size"] > 0 and m["expires_at"] and m["size_vram"] == 0 and m["kv_blocks_total"] > 0
                assert set(m["details"]) >= {"format", "family", "parameter_size", "quantization_level"}
            assert "tiny2" in cli(tmp_path, "ps").stdout
            other = http.post("/v1/chat/completions", json={"model": "tiny2", "max_tokens": 2,
                                                            "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
            assert other.status_code == 200 and other.json()["model"] == "tiny2"
            assert cli(tmp_path, "unload", "tiny2").returncode == 0
            assert [m["name"] for m in http.get("/api/ps").json()["models"]] == ["tiny"]
            tags = [m["name"] for m in http.get("/api/tags").json()["models"]]
            assert tags == ["tiny", "tiny2"]

            # a LoRA adapter on the default model, picked by the model name tiny:style
            adapter = tmp_path / "adapters" / "style.safetensors"  # the default --adapters-dir
            adapter.parent.mkdir()
            save_adapter(adapter)
            lora = cli(tmp_path, "lora", "load", "tiny", str(adapter), "--name", "style", "--alpha", "16")
            assert lora.returncode == 0, lora.stderr
            assert http.get("/api/ps").json()["models"][0]["adapters"] == ["style"]
            base = cli(tmp_path, "generate", "tiny", "hello", "-n", "8", "-t", "0")
            styled = cli(tmp_path, "generate", "tiny:style", "hello", "-n", "8", "-t", "0")
            assert styled.returncode == 0 and styled.stdout != base.stdout
            assert cli(tmp_path, "lora", "unload", "tiny", "style").returncode == 0
            gone = cli(tmp_path, "generate", "tiny:style", "hello")
            assert gone.returncode == 1 and "no LoRA adapter 'style'" in gone.stderr

            # keep-alive: an idle model unloads by itself (after its keep-alive + the 2 s grace)
            assert cli(tmp_path, "load", "tiny2", "--keep-alive", "0").returncode == 0
            deadline = time.monotonic() + 20
            while len(http.get("/api/ps").json()["models"]) > 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert [m["name"] for m in http.get("/api/ps").json()["models"]] == ["tiny"]

        stop = cli(tmp_path, "stop")
        assert stop.returncode == 0, stop.stderr
        assert not alive(pid)
        assert not (tmp_path / "daemon.json").exists()
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
