"""safetensors read/write with NumPy, checked against hand-built bytes."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from electra_tf.checkpoints import safetensors_io


def _hand_built(header: dict, payload: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + payload


def test_safetensors_reads_hand_built_bytes(tmp_path):
    a = np.array([[1.5, -2.0, 3.25]], dtype="<f4")  # [1, 3]
    b = np.array([7, -8], dtype="<i8")
    payload = a.tobytes() + b.tobytes()
    header = {
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [1, 3], "data_offsets": [0, 12]},
        "b": {"dtype": "I64", "shape": [2], "data_offsets": [12, 28]},
    }
    path = tmp_path / "x.safetensors"
    path.write_bytes(_hand_built(header, payload))
    tensors, metadata = safetensors_io.load_file_with_metadata(str(path))
    assert metadata == {"format": "pt"}
    np.testing.assert_array_equal(tensors["a"], [[1.5, -2.0, 3.25]])
    np.testing.assert_array_equal(tensors["b"], [7, -8])
    assert tensors["a"].dtype == np.float32 and tensors["b"].dtype == np.int64


def test_safetensors_writes_the_exact_layout(tmp_path):
    path = tmp_path / "y.safetensors"
    safetensors_io.save_file(
        {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.array(1.0, np.float16)},
        str(path),
        {"format": "pt"},
    )
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0  # header padded so tensor data is 8-byte aligned
    header = json.loads(raw[8 : 8 + n])
    assert header["__metadata__"] == {"format": "pt"}
    # Sorted by name: "s" (2 bytes of F16) comes first, then "w".
    assert header["s"] == {"dtype": "F16", "shape": [], "data_offsets": [0, 2]}
    assert header["w"] == {"dtype": "F32", "shape": [2, 3], "data_offsets": [2, 26]}
    data = raw[8 + n :]
    assert data[:2] == np.float16(1.0).tobytes()
    assert data[2:] == struct.pack("<6f", 0, 1, 2, 3, 4, 5)


def test_safetensors_bf16_round_trip(tmp_path):
    import ml_dtypes

    value = np.array([1.0, -0.5, 3.0], dtype=ml_dtypes.bfloat16)
    safetensors_io.save_file({"v": value}, str(tmp_path / "b.safetensors"))
    loaded = safetensors_io.load_file(str(tmp_path / "b.safetensors"))["v"]
    assert loaded.dtype == value.dtype
    np.testing.assert_array_equal(loaded.astype(np.float32), [1.0, -0.5, 3.0])


@pytest.mark.parametrize(
    "header, payload, message",
    [
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "do not hold"),
        (
            {
                "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
            },
            b"\0" * 12,
            "without gaps",
        ),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 6, "trailing"),
        ({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8, "dtype"),
    ],
)
def test_safetensors_rejects_malformed_files(tmp_path, header, payload, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(_hand_built(header, payload))
    with pytest.raises(safetensors_io.SafetensorsError, match=message) as info:
        safetensors_io.load_file(str(path))
    assert str(path) in str(info.value)
