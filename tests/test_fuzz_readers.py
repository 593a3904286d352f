"""Property tests: every reader fed mutated or truncated inputs answers with a ModelcError or a result,
never another exception (no IndexError, struct.error, RecursionError, MemoryError...).

Each reader starts from one valid input and hypothesis truncates it, flips and inserts bytes, and
overwrites 4- or 8-byte fields with extreme integers (lengths, offsets, counts). Few examples by
default so the suite stays fast; MODELC_FUZZ_EXAMPLES=2000 runs a real campaign.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelc.errors import ModelcError

ROOT = pathlib.Path(__file__).resolve().parent
EXAMPLES = int(os.environ.get("MODELC_FUZZ_EXAMPLES", "15"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("MODELC_FUZZ_EXAMPLES") is None,  # CI: the same examples every run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
EXTREMES = [0, 1, 0x7F, 0xFF, 0x7FFF_FFFF, 0xFFFF_FFFF, 2**63 - 1, 2**64 - 1]


@st.composite
def mutated(draw: Any, data: bytes) -> bytes:
    """A few random edits of `data`: truncation, byte flips, inserted junk, extreme integer fields."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "flip", "insert", "int32", "int64", "delete"]))
        if not buf:
            break
        pos = draw(st.integers(0, len(buf) - 1))
        if op == "truncate":
            del buf[pos:]
        elif op == "flip":
            buf[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del buf[pos : pos + draw(st.integers(1, 16))]
        else:
            size = 4 if op == "int32" else 8
            value = draw(st.sampled_from(EXTREMES)) & ((1 << (8 * size)) - 1)
            buf[pos : pos + size] = value.to_bytes(size, "little")
    return bytes(buf)


def survives(read: Callable[[], Any]) -> None:
    """The one property: a ModelcError or a result, nothing else."""
    try:
        read()
    except ModelcError:
        pass


def _file(tmp: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
    p = tmp / name
    p.write_bytes(data)
    return p


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: Any) -> dict[str, bytes]:
    """One valid input per format, built here (no downloads)."""
    from safetensors.numpy import save_file

    from modelc.artifact import write_artifact
    from modelc.artifact.tiny import make_model
    from tests.formats.gguf_factory import write_tiny_llama
    from tests.formats.torch_factory import write_checkpoint

    d = tmp_path_factory.mktemp("seeds")
    rng = np.random.default_rng(0)
    arrays = {"a.weight": rng.standard_normal((4, 8)).astype(np.float32), "b": np.arange(6, dtype=np.int64)}
    save_file(arrays, str(d / "s.safetensors"))
    write_tiny_llama(d / "g.gguf")
    write_checkpoint(d / "p.pt", {"w": arrays["a.weight"]})
    write_artifact(make_model(0, name="fuzz"), d / "m.modelc")
    index = {"models": [{"name": "u/m", "versions": [{"version": 1, "architecture": "llama", "quant": "F32",
                                                      "params": 10, "size": 100, "sha256": "0" * 64,
                                                      "path": "u/m/m-v1.modelc"}]}]}  # fmt: skip
    return {
        "safetensors": (d / "s.safetensors").read_bytes(),
        "gguf": (d / "g.gguf").read_bytes(),
        "pytorch": (d / "p.pt").read_bytes(),
        "modelc": (d / "m.modelc").read_bytes(),
        "onnx": (ROOT / "fixtures/onnx/tiny_bert.onnx").read_bytes(),
        "tokenizer": (ROOT / "fixtures/tokenizer/tiny-byte-level.json").read_bytes(),
        "registry": json.dumps(index).encode(),
    }


def _touch_tensors(model: Any) -> None:
    """Read every tensor's bytes (block-quantized ones have no plain numpy view)."""
    for t in model.tensors.values():
        int(np.frombuffer(t.data, np.uint8).sum()) if len(t.data) else 0


def test_seeds_are_valid(seeds: dict[str, bytes], tmp_path: pathlib.Path) -> None:
    """The unmutated inputs read fine, so the properties below test the readers, not broken seeds."""
    from modelc.artifact import open_artifact
    from modelc.formats.gguf import read_gguf
    from modelc.formats.onnx import read_onnx
    from modelc.formats.pytorch import read_pytorch
    from modelc.formats.safetensors import read_safetensors
    from modelc.registry import parse_index
    from modelc.tokenizer.tokenizer import Tokenizer

    _touch_tensors(read_safetensors(_file(tmp_path, "x.safetensors", seeds["safetensors"])))
    _touch_tensors(read_gguf(_file(tmp_path, "x.gguf", seeds["gguf"])))
    _touch_tensors(read_pytorch(_file(tmp_path, "x.pt", seeds["pytorch"])))
    _touch_tensors(open_artifact(_file(tmp_path, "x.modelc", seeds["modelc"]), verify=True))
    read_onnx(_file(tmp_path, "x.onnx", seeds["onnx"]))
    Tokenizer.from_json(seeds["tokenizer"].decode()).encode("hello")
    assert parse_index(json.loads(seeds["registry"]))


READERS: dict[str, tuple[str, Callable[[pathlib.Path], Any]]] = {}


def reader(kind: str, suffix: str) -> Callable[[Callable[[pathlib.Path], Any]], Callable[[pathlib.Path], Any]]:
    def register(fn: Callable[[pathlib.Path], Any]) -> Callable[[pathlib.Path], Any]:
        READERS[kind] = (suffix, fn)
        return fn

    return register


@reader("safetensors", ".safetensors")
def _safetensors(p: pathlib.Path) -> None:
    from modelc.formats.safetensors import read_safetensors

    _touch_tensors(read_safetensors(p))


@reader("gguf", ".gguf")
def _gguf(p: pathlib.Path) -> None:
    from modelc.formats.gguf import read_gguf

    _touch_tensors(read_gguf(p))


@reader("pytorch", ".pt")
def _pytorch(p: pathlib.Path) -> None:
    from modelc.formats.pytorch import read_pytorch

    _touch_tensors(read_pytorch(p))


@reader("modelc", ".modelc")
def _modelc(p: pathlib.Path) -> None:
    from modelc.artifact import open_artifact

    _touch_tensors(open_artifact(p, verify=True))


@reader("onnx", ".onnx")
def _onnx(p: pathlib.Path) -> None:
    from modelc.formats.onnx import read_onnx

    read_onnx(p)


@reader("tokenizer", ".json")
def _tokenizer(p: pathlib.Path) -> None:
    from modelc.tokenizer.tokenizer import Tokenizer

    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return  # the artifact stores tokenizer.json as text: non-UTF-8 never reaches the loader
    Tokenizer.from_json(text).encode("hello world")


@reader("registry", ".json")
def _registry(p: pathlib.Path) -> None:
    from modelc.registry import load_index

    load_index(str(p.parent))


@pytest.mark.parametrize("kind", ["safetensors", "gguf", "pytorch", "modelc", "onnx", "tokenizer", "registry"])
def test_mutated_inputs_raise_only_modelc_errors(kind: str, seeds: dict[str, bytes], tmp_path: pathlib.Path) -> None:
    suffix, read = READERS[kind]
    name = "index.json" if kind == "registry" else f"input{suffix}"

    @FUZZ
    @given(data=mutated(seeds[kind]))
    def check(data: bytes) -> None:
        survives(lambda: read(_file(tmp_path, name, data)))

    check()


@FUZZ
@given(source=st.text(alphabet=st.sampled_from(list("{}%#()[]|~-+.,:'\"= abc\nloopifendsetmessagesrole")), max_size=80))
def test_chat_templates_raise_only_modelc_errors(source: str) -> None:
    from modelc.tokenizer.chat_template import ChatTemplate

    def render() -> None:
        ChatTemplate(source).render([{"role": "user", "content": "hi"}], add_generation_prompt=True)

    survives(render)


def test_deep_json_headers_are_format_errors(tmp_path: pathlib.Path) -> None:
    """The recursion limit: JSON nested 100k deep in every JSON-carrying header."""
    from modelc.artifact import open_artifact
    from modelc.formats.safetensors import read_safetensors
    from modelc.registry import load_index

    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(ModelcError):
        read_safetensors(_file(tmp_path, "d.safetensors", struct.pack("<Q", len(deep)) + deep))
    with pytest.raises(ModelcError):
        open_artifact(_file(tmp_path, "d.modelc", b"MODELC\0\0" + struct.pack("<IQ", 1, len(deep)) + deep))
    _file(tmp_path, "index.json", b'{"models": ' + deep + b"}")
    with pytest.raises(ModelcError):
        load_index(str(tmp_path))
