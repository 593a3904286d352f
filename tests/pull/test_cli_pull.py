"""`modelc pull REF`, `modelc search --hf` and `modelc run REF`'s pull on first use, against the fake Hub."""

from __future__ import annotations

from modelc import store
from modelc.cli.main import main
from modelc.daemon import launch

from .models import tiny_gguf


def run(capsys, *argv):
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_pull_and_search(hub, tmp_path, capsys):
    hub.add("org/tiny-GGUF", {"tiny-Q4_K_M.gguf": tiny_gguf(tmp_path / "t.gguf")}, downloads=3)
    code, out, err = run(capsys, "pull", "hf.co/org/tiny-GGUF")
    assert code == 0 and "pulled hf.co/org/tiny-GGUF -> hf.co/org/tiny-GGUF (" in out
    assert "modelc: pulling manifest" in err
    code, out, _ = run(capsys, "search", "tiny", "--hf")
    assert code == 0 and "hf.co/org/tiny-GGUF" in out
    code, _, err = run(capsys, "pull", "hf.co/org/tiny-GGUF:Q2_K")
    assert code == 1 and err.strip().splitlines()[-1] == "error: hf.co/org/tiny-GGUF has no Q2_K GGUF (it has: Q4_K_M)"
    code, _, err = run(capsys, "pull", "hf://org/nothing")
    assert code == 1 and "no such repo" in err


def test_run_pulls_on_first_use_only(hub, tmp_path):
    hub.add("org/tiny-GGUF", {"tiny-Q4_K_M.gguf": tiny_gguf(tmp_path / "t.gguf")})
    path, name = launch.serve_target("hf.co/org/tiny-GGUF:q4_k_m")
    assert name == "hf.co/org/tiny-GGUF-Q4_K_M" and path == store.active_path(name)
    n = len(hub.requests)
    assert launch.serve_target("hf.co/org/tiny-GGUF:Q4_K_M") == (path, name)
    assert len(hub.requests) == n  # the store's copy: no request
