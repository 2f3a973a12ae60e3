"""Reading and writing the safetensors format with NumPy alone (no torch, no `safetensors`).

Layout of a `.safetensors` file (https://github.com/huggingface/safetensors, format section):

    [8 bytes]  N, the header length, unsigned 64-bit little-endian
    [N bytes]  a UTF-8 JSON object: {"<tensor name>": {"dtype": "F32", "shape": [2, 3],
               "data_offsets": [begin, end]}, ..., "__metadata__": {"str": "str"}} (optional)
    [rest]     the byte buffer; each tensor's bytes are buffer[begin:end], little-endian, C order

Offsets are relative to the start of the byte buffer. The reference writer pads the header
with spaces to a multiple of 8 bytes so tensors start aligned; this writer does the same.
Readers must reject overlapping or gapped offsets and sizes that disagree with dtype x shape,
and so does `load_file`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from electra_tf.runtime.atomic_io import write_bytes

# The header's dtype codes and their little-endian NumPy equivalents. BF16 has no NumPy type;
# ml_dtypes (a TensorFlow dependency) provides one and is imported only when needed.
_CODES_TO_NUMPY: dict[str, str] = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
}
# A header longer than this is certainly not a safetensors file (the reference uses 100 MB).
_MAX_HEADER_BYTES = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    """A malformed safetensors file or an unsupported tensor; the message names the file."""


def _numpy_dtype(code: str, where: str) -> np.dtype:
    if code == "BF16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if code not in _CODES_TO_NUMPY:
        raise SafetensorsError(f"{where}: unsupported dtype {code!r}")
    return np.dtype(_CODES_TO_NUMPY[code])


def _dtype_code(dtype: np.dtype, where: str) -> str:
    if dtype.name == "bfloat16":
        return "BF16"
    for code, name in _CODES_TO_NUMPY.items():
        if np.dtype(name).kind == dtype.kind and np.dtype(name).itemsize == dtype.itemsize:
            return code
    raise SafetensorsError(f"{where}: cannot store dtype {dtype} in safetensors")


def _is_count(value: object) -> bool:
    # JSON's true/false parse as bool, a subclass of int: not a size.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor(where: str, info: Any, buffer: memoryview) -> tuple[int, int, np.ndarray]:
    """One header entry checked against the buffer: (begin, end, a native-order copy)."""
    try:
        code, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
    except (TypeError, KeyError, ValueError) as e:
        raise SafetensorsError(f"{where}: needs dtype, shape and data_offsets ({e})") from e
    if not isinstance(code, str):
        raise SafetensorsError(f"{where}: dtype {code!r} is not a string")
    dtype = _numpy_dtype(code, where)
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise SafetensorsError(f"{where}: shape {shape!r} is not a list of integers >= 0")
    if not (_is_count(begin) and _is_count(end)):
        raise SafetensorsError(f"{where}: data_offsets {[begin, end]!r} are not two integers >= 0")
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not (0 <= begin <= end <= len(buffer)) or end - begin != expected:
        raise SafetensorsError(
            f"{where}: data_offsets [{begin}, {end}] do not hold {code}{list(shape)} "
            f"({expected} bytes) inside a {len(buffer)}-byte buffer"
        )
    array = np.frombuffer(buffer[begin:end], dtype=dtype).reshape(shape)
    # Copy into native byte order so callers get ordinary writable arrays.
    return begin, end, array.astype(dtype.newbyteorder("="), copy=True)


def load_file_with_metadata(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Reads every tensor of `path` into NumPy arrays (native byte order) plus `__metadata__`."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise SafetensorsError(f"{path}: {len(data)} bytes, too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > _MAX_HEADER_BYTES or 8 + header_len > len(data):
        raise SafetensorsError(
            f"{path}: header length {header_len} does not fit in a {len(data)}-byte file"
        )
    try:
        header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not UTF-8 JSON ({e})") from e
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise SafetensorsError(f"{path}: __metadata__ must map strings to strings")
    buffer = memoryview(data)[8 + header_len :]

    tensors: dict[str, np.ndarray] = {}
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        begin, end, tensors[name] = _tensor(f"{path}: tensor {name!r}", info, buffer)
        spans.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise SafetensorsError(
                f"{path}: tensor {name!r} starts at byte {begin}, expected {position} "
                "(tensors must tile the buffer without gaps or overlaps)"
            )
        position = end
    if position != len(buffer):
        raise SafetensorsError(f"{path}: {len(buffer) - position} trailing bytes after tensors")
    return tensors, metadata


def load_file(path: str) -> dict[str, np.ndarray]:
    """Reads every tensor of a safetensors file into NumPy arrays."""
    return load_file_with_metadata(path)[0]


def serialize(
    tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None
) -> bytes:
    """The bytes of a safetensors file holding `tensors` (sorted by name) and `metadata`."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        array = np.asarray(tensors[name])
        code = _dtype_code(array.dtype, f"tensor {name!r}")
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        raw = np.ascontiguousarray(little).tobytes()
        header[name] = {
            "dtype": code,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    return struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(chunks)


def save_file(
    tensors: Mapping[str, np.ndarray], path: str, metadata: Mapping[str, str] | None = None
) -> None:
    """Writes `tensors` to `path` atomically (temporary file in the same folder, then rename)."""
    write_bytes(path, serialize(tensors, metadata))
