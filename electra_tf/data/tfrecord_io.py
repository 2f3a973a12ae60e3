"""A TFRecord file writer that needs no TensorFlow.

Importing TensorFlow costs 5-13 s on this class of machine, more than tokenising a few MB of
text, so data preparation writes the record framing itself: for each record, the uint64
little-endian length, the masked CRC32C of those 8 bytes, the payload and its masked CRC32C
(the format `tf.io.TFRecordWriter` writes; `tf.data.TFRecordDataset` reads it back).
"""

from __future__ import annotations

import struct

import google_crc32c

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class TFRecordWriter:
    """Writes serialized records to `path`; use as a context manager or call `close()`."""

    def __init__(self, path: str):
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()

    def write(self, record: bytes) -> None:
        header = _LENGTH.pack(len(record))
        self._file.write(header + _CRC.pack(masked_crc32c(header)))
        self._file.write(record)
        self._file.write(_CRC.pack(masked_crc32c(record)))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
