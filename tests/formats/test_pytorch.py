from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np
import pytest
from safetensors.numpy import save, save_file

from modelc.errors import FormatError, UnsupportedError
from modelc.formats.pytorch import read_pytorch

from .torch_factory import write_checkpoint, write_zip


def _arrays():
    rng = np.random.default_rng(3)
    return {
        "model.embed.weight": rng.standard_normal((6, 4)).astype(np.float32),
        "model.norm.weight": rng.standard_normal(4).astype(np.float16),
        "model.pos": np.arange(5, dtype=np.int64),
        "empty": np.zeros((0, 3), np.float32),
    }


def test_state_dict_zero_copy(tmp_path):
    p = tmp_path / "pytorch_model.bin"
    arrays = _arrays()
    write_checkpoint(p, arrays)
    m = read_pytorch(p)
    assert m.source_format == "pytorch" and set(m.tensors) == set(arrays)
    for name, a in arrays.items():
        np.testing.assert_array_equal(m.tensors[name].array(), a)
    emb = m.tensors["model.embed.weight"].data
    assert not emb.flags.owndata and isinstance(emb.base, np.memmap | np.ndarray)
    assert "pytorch_copied_noncontiguous" not in m.metadata


def test_non_contiguous_is_copied_with_a_note(tmp_path):
    p = tmp_path / "m.pt"
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}
    write_checkpoint(p, arrays, transpose={"w"})
    m = read_pytorch(p)
    np.testing.assert_array_equal(m.tensors["w"].array(), arrays["w"])
    assert m.metadata["pytorch_copied_noncontiguous"] == ["w"]


def test_nested_state_dict_and_compressed_entries(tmp_path):
    p = tmp_path / "ckpt.pth"
    arrays = _arrays()
    write_checkpoint(p, arrays, wrap="state_dict", compress=True)
    m = read_pytorch(p)
    np.testing.assert_array_equal(m.tensors["model.pos"].array(), arrays["model.pos"])


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("touch SHOULD_NOT_EXIST",))


def test_malicious_pickle_is_refused_and_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "evil.pt"
    write_zip(p, pickle.dumps({"w": _Evil()}, protocol=2), {})
    with pytest.raises(FormatError, match="refused pickle global (os|posix).system"):
        read_pytorch(p)
    assert not (tmp_path / "SHOULD_NOT_EXIST").exists()


@pytest.mark.parametrize(
    "payload",
    [
        b"cbuiltins\neval\n(S'1'\ntR.",  # GLOBAL builtins.eval
        pickle.dumps(getattr, protocol=4),  # STACK_GLOBAL builtins.getattr
        b"(S'x'\nios\nsystem\n.",  # INST
    ],
)
def test_other_globals_refused(tmp_path, payload):
    p = tmp_path / "evil.pt"
    write_zip(p, payload, {})
    with pytest.raises(FormatError, match="refused pickle global"):
        read_pytorch(p)


def test_missing_storage_and_garbage_pickle(tmp_path):
    p = tmp_path / "m.pt"
    write_checkpoint(p, {"w": np.ones(3, np.float32)})
    with zipfile.ZipFile(p) as zf:
        pkl = zf.read("archive/data.pkl")
    write_zip(p, pkl, {})
    with pytest.raises(FormatError, match="storage 0 is missing"):
        read_pytorch(p)
    write_zip(p, b"\x80\x02garbage", {})
    with pytest.raises(FormatError, match="cannot unpickle"):
        read_pytorch(p)


def test_storage_too_small(tmp_path):
    p = tmp_path / "m.pt"
    write_checkpoint(p, {"w": np.ones(8, np.float32)})
    with zipfile.ZipFile(p) as zf:
        pkl = zf.read("archive/data.pkl")
    write_zip(p, pkl, {"0": b"\0" * 8})
    with pytest.raises(FormatError, match="storage 0 has 8 bytes"):
        read_pytorch(p)


def test_truncated_zip(tmp_path):
    p = tmp_path / "m.pt"
    write_checkpoint(p, _arrays())
    blob = p.read_bytes()
    for cut in (10, len(blob) // 2, len(blob) - 5):
        p.write_bytes(blob[:cut])
        with pytest.raises(FormatError):
            read_pytorch(p)


def test_legacy_format_unsupported(tmp_path):
    p = tmp_path / "old.pt"
    p.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2))
    with pytest.raises(UnsupportedError, match="legacy"):
        read_pytorch(p)


def test_safetensors_named_pt_and_in_zip(tmp_path):
    arrays = {"w": np.arange(4, dtype=np.float32)}
    p = tmp_path / "model.pt"
    save_file(arrays, str(p))
    np.testing.assert_array_equal(read_pytorch(p).tensors["w"].array(), arrays["w"])
    z = tmp_path / "bundle.pth"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("model.safetensors", save(arrays))
    t = read_pytorch(z).tensors["w"]
    np.testing.assert_array_equal(t.array(), arrays["w"])
    assert not t.data.flags.owndata


def test_not_a_checkpoint(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"hello world, nothing here")
    with pytest.raises(FormatError, match="not a PyTorch checkpoint"):
        read_pytorch(p)
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("readme.txt", "hi")
    with pytest.raises(FormatError, match="no data.pkl"):
        read_pytorch(p)
    buf = io.BytesIO()
    pickle.dump({"epoch": 1}, buf, protocol=2)
    write_zip(p, buf.getvalue(), {})
    with pytest.raises(FormatError, match="no state dict"):
        read_pytorch(p)


def test_huge_claims_and_bad_geometry(tmp_path):
    from .torch_factory import _Pickler, _Storage, _Tensor, fake_torch

    p = tmp_path / "m.pt"
    for numel, size, stride, match in [
        (1 << 60, (1 << 30, 1 << 30), (1 << 30, 1), "storage 0 has 16 bytes"),
        (4, (4, 4), (4, 1), "runs past its storage"),
        (4, (-1,), (1,), "bad tensor geometry"),
        (4, (1 << 16, 1 << 16), (0, 0), "stride 0"),  # 16 bytes broadcast to 16 GiB
        (4, (1 << 28, 4), (0, 1), "stride 0"),  # a row repeated 2^28 times
        (4, (3, 2), (1, 1), "larger than its storage"),  # overlapping strides: 6 elements from 4
    ]:
        with fake_torch() as (torch, utils):
            st = _Storage("0", np.zeros(4, np.float32))
            st.arr = np.lib.stride_tricks.as_strided(st.arr, (numel,), (0,)) if numel > 4 else st.arr
            buf = io.BytesIO()
            _Pickler(buf, torch).dump({"w": _Tensor(st, 0, size, stride, utils._rebuild_tensor_v2)})
        write_zip(p, buf.getvalue(), {"0": b"\0" * 16})
        with pytest.raises(FormatError, match=match):
            read_pytorch(p)


def test_unknown_storage_type_is_unsupported(tmp_path):
    p = tmp_path / "m.pt"
    write_zip(p, b"ctorch\nFloat8_e4m3fnStorage\n.", {})
    with pytest.raises(UnsupportedError, match="Float8_e4m3fnStorage"):
        read_pytorch(p)


def test_zip_bomb_entry_is_refused(tmp_path):
    p = tmp_path / "m.pt"
    write_checkpoint(p, {"w": np.zeros(1 << 20, np.float32)}, compress=True)  # 4 MiB of zeros deflate ~1000x
    with pytest.raises(FormatError, match="claims"):
        read_pytorch(p)
