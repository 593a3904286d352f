"""The IR: a Model is named tensors plus metadata; TensorData is a zero-copy view.

No maths here. Shapes are logical element shapes in row-major (numpy/PyTorch)
order: the LAST dimension is contiguous and, for GGML block types, blocked.
(GGUF lists dims fastest-first; readers reverse them into this order.)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from modelc.errors import FormatError, UnsupportedError


class DataType(enum.Enum):
    """Stored element types. value = the name used in artifact headers."""

    F32 = "F32"
    F16 = "F16"
    BF16 = "BF16"
    F64 = "F64"
    I8 = "I8"
    I16 = "I16"
    I32 = "I32"
    I64 = "I64"
    U8 = "U8"
    BOOL = "BOOL"
    I4 = "I4"  # pack-time int4: two signed nibbles per byte, low nibble first
    Q4_0 = "Q4_0"
    Q4_1 = "Q4_1"
    Q5_0 = "Q5_0"
    Q5_1 = "Q5_1"
    Q8_0 = "Q8_0"
    Q2_K = "Q2_K"
    Q3_K = "Q3_K"
    Q4_K = "Q4_K"
    Q5_K = "Q5_K"
    Q6_K = "Q6_K"
    Q8_K = "Q8_K"
    IQ4_NL = "IQ4_NL"
    IQ4_XS = "IQ4_XS"
    IQ3_S = "IQ3_S"
    IQ3_XXS = "IQ3_XXS"
    IQ2_XXS = "IQ2_XXS"
    IQ2_XS = "IQ2_XS"
    IQ2_S = "IQ2_S"
    IQ1_S = "IQ1_S"
    IQ1_M = "IQ1_M"
    TQ1_0 = "TQ1_0"
    TQ2_0 = "TQ2_0"
    Q1_0 = "Q1_0"  # llama.cpp's 1-bit type: 128 signs and one F16 scale
    Q2_0 = "Q2_0"  # llama.cpp's 2-bit type: 64 codes (-1, 0, 1, 2) and one F16 scale
    MXFP4 = "MXFP4"

    @property
    def block_size(self) -> int:
        """Elements per block (1 for plain types)."""
        return _LAYOUT[self][0]

    @property
    def type_size(self) -> int:
        """Bytes per block."""
        return _LAYOUT[self][1]

    @property
    def is_quantized(self) -> bool:
        return self.block_size > 1

    @property
    def numpy_dtype(self) -> np.dtype | None:
        """The numpy dtype of a plain type; None for block types, BF16 and I4."""
        return _NUMPY.get(self)

    @property
    def ggml_type(self) -> int | None:
        return _GGML_ID.get(self)

    def nbytes(self, shape: tuple[int, ...]) -> int:
        """Bytes needed for `shape`; raises FormatError when the last dim is not whole blocks."""
        n = 1
        for d in shape:
            if d < 0:
                raise FormatError(f"negative dimension in shape {shape}")
            n *= int(d)
        bs = self.block_size
        if bs > 1:
            row = shape[-1] if shape else 1
            if row % bs:
                raise FormatError(f"{self.value} needs the last dimension to be a multiple of {bs}, got {shape}")
        if self is DataType.I4:
            row = shape[-1] if shape else 1
            rows = n // row if row else 0
            return rows * ((row + 1) // 2)
        return n // bs * self.type_size

    @classmethod
    def parse(cls, name: str, *, tensor: str | None = None) -> DataType:
        try:
            return cls(name.upper())
        except ValueError:
            where = f" in tensor {tensor}" if tensor else ""
            raise UnsupportedError(f"unsupported type {name}{where}") from None

    @classmethod
    def from_ggml(cls, type_id: int, *, tensor: str | None = None) -> DataType:
        for dt, gid in _GGML_ID.items():
            if gid == type_id:
                return dt
        where = f" in tensor {tensor}" if tensor else ""
        name = _GGML_NAMES.get(type_id, f"ggml type {type_id}")
        raise UnsupportedError(f"unsupported type {name}{where}")


# (elements per block, bytes per block), the GGML layouts for block types.
_LAYOUT: dict[DataType, tuple[int, int]] = {
    DataType.F32: (1, 4),
    DataType.F16: (1, 2),
    DataType.BF16: (1, 2),
    DataType.F64: (1, 8),
    DataType.I8: (1, 1),
    DataType.I16: (1, 2),
    DataType.I32: (1, 4),
    DataType.I64: (1, 8),
    DataType.U8: (1, 1),
    DataType.BOOL: (1, 1),
    DataType.I4: (2, 1),
    DataType.Q4_0: (32, 18),
    DataType.Q4_1: (32, 20),
    DataType.Q5_0: (32, 22),
    DataType.Q5_1: (32, 24),
    DataType.Q8_0: (32, 34),
    DataType.Q2_K: (256, 84),
    DataType.Q3_K: (256, 110),
    DataType.Q4_K: (256, 144),
    DataType.Q5_K: (256, 176),
    DataType.Q6_K: (256, 210),
    DataType.Q8_K: (256, 292),
    DataType.IQ4_NL: (32, 18),
    DataType.IQ4_XS: (256, 136),
    DataType.IQ3_S: (256, 110),
    DataType.IQ3_XXS: (256, 98),
    DataType.IQ2_XXS: (256, 66),
    DataType.IQ2_XS: (256, 74),
    DataType.IQ2_S: (256, 82),
    DataType.IQ1_S: (256, 50),
    DataType.IQ1_M: (256, 56),
    DataType.TQ1_0: (256, 54),
    DataType.TQ2_0: (256, 66),
    DataType.Q1_0: (128, 18),
    DataType.Q2_0: (64, 18),
    DataType.MXFP4: (32, 17),
}

_NUMPY: dict[DataType, np.dtype] = {
    DataType.F32: np.dtype("<f4"),
    DataType.F16: np.dtype("<f2"),
    DataType.F64: np.dtype("<f8"),
    DataType.I8: np.dtype("i1"),
    DataType.I16: np.dtype("<i2"),
    DataType.I32: np.dtype("<i4"),
    DataType.I64: np.dtype("<i8"),
    DataType.U8: np.dtype("u1"),
    DataType.BOOL: np.dtype("?"),
}

# GGML's type ids (ggml.h enum ggml_type).
_GGML_ID: dict[DataType, int] = {
    DataType.F32: 0,
    DataType.F16: 1,
    DataType.Q4_0: 2,
    DataType.Q4_1: 3,
    DataType.Q5_0: 6,
    DataType.Q5_1: 7,
    DataType.Q8_0: 8,
    DataType.Q2_K: 10,
    DataType.Q3_K: 11,
    DataType.Q4_K: 12,
    DataType.Q5_K: 13,
    DataType.Q6_K: 14,
    DataType.Q8_K: 15,
    DataType.IQ2_XXS: 16,
    DataType.IQ2_XS: 17,
    DataType.IQ3_XXS: 18,
    DataType.IQ1_S: 19,
    DataType.IQ4_NL: 20,
    DataType.IQ3_S: 21,
    DataType.IQ2_S: 22,
    DataType.IQ4_XS: 23,
    DataType.IQ1_M: 29,
    DataType.TQ1_0: 34,
    DataType.TQ2_0: 35,
    DataType.Q1_0: 41,
    DataType.Q2_0: 42,
    DataType.MXFP4: 39,
    DataType.I8: 24,
    DataType.I16: 25,
    DataType.I32: 26,
    DataType.I64: 27,
    DataType.F64: 28,
    DataType.BF16: 30,
}

_GGML_NAMES = {9: "Q8_1", 40: "NVFP4"}

SCALE_SUFFIX = "@scale"
"""int8/int4 pack-time quantization stores tensor X's per-output-channel F32 scales as X@scale."""


@dataclass(slots=True)
class TensorData:
    """One tensor: logical shape, stored dtype, and its bytes as a uint8 view (never a copy).

    `data` is a 1-D uint8 numpy array viewing an mmap'd file (or an owned buffer
    for tensors made at pack time). `nbytes == len(data)` always holds.
    """

    shape: tuple[int, ...]
    dtype: DataType
    data: np.ndarray

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        want = self.dtype.nbytes(self.shape)
        if self.data.dtype != np.uint8 or self.data.ndim != 1:
            self.data = np.asarray(self.data).reshape(-1).view(np.uint8)
        if len(self.data) != want:
            raise FormatError(
                f"tensor of shape {self.shape} {self.dtype.value} needs {want} bytes, has {len(self.data)}"
            )

    @property
    def nbytes(self) -> int:
        return len(self.data)

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def array(self) -> np.ndarray:
        """A typed zero-copy view for plain dtypes (shape applied). BF16 -> uint16 view."""
        if self.dtype is DataType.BF16:
            return self.data.view("<u2").reshape(self.shape)
        npd = self.dtype.numpy_dtype
        if npd is None:
            raise UnsupportedError(f"{self.dtype.value} has no plain numpy view")
        return self.data.view(npd).reshape(self.shape)

    def blocks(self) -> np.ndarray:
        """Block types: a (rows, bytes_per_row) uint8 view."""
        row = self.shape[-1] if self.shape else 1
        row_bytes = self.dtype.nbytes((row,))
        return self.data.reshape(-1, row_bytes) if row_bytes else self.data.reshape(0, 0)

    @classmethod
    def from_array(cls, arr: np.ndarray) -> TensorData:
        """Wrap a plain numpy array (copied to C order only if it is not already)."""
        arr = np.ascontiguousarray(arr)
        for dt, npd in _NUMPY.items():
            if arr.dtype == npd:
                return cls(arr.shape, dt, arr.reshape(-1).view(np.uint8))
        raise UnsupportedError(f"no DataType for numpy dtype {arr.dtype}")


@dataclass(slots=True, weakref_slot=True)
class Model:
    """A model as read from any format, before packing.

    config: hyper-parameters under normalized names (see docs/artifact.md):
      vocab_size, hidden_size, intermediate_size, num_hidden_layers,
      num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings,
      rms_norm_eps / layer_norm_eps, rope_theta, rope_scaling, tie_word_embeddings ...
    special_tokens: bos_token_id, eos_token_ids (list), pad_token_id, eot_token_id,
      bos_token, eos_token (strings), add_bos_token (bool).
    tensor_names: the tensors' names as the source format spells them; `naming`
      says which scheme ("hf" or "gguf") so models can map them.
    """

    name: str
    architecture: str
    tensors: dict[str, TensorData]
    config: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    tokenizer_json: str | None = None
    chat_template: str | None = None
    special_tokens: dict[str, Any] = field(default_factory=dict)
    generation_config: dict[str, Any] = field(default_factory=dict)
    source_format: str = ""
    naming: str = "hf"

    @property
    def num_params(self) -> int:
        return sum(t.num_elements for n, t in self.tensors.items() if not n.endswith(SCALE_SUFFIX))

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())
