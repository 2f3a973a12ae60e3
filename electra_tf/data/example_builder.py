"""Packing token lines into pre-training examples, as the original `ExampleBuilder`.

google-research/electra `build_pretraining_dataset.py` (after its segment-split fix;
docs/faithfulness.md, section 8 'Pre-training data'):
lines are buffered until they hold at least `target_length` tokens, then split into segments A
and B (10% of examples: A only), truncated (the overflow is dropped, not carried over) and framed
as `[CLS] A [SEP] B [SEP]` + padding. The next target is `randint(5, max_length)` with
probability 0.05, else `max_length`. A document boundary flushes the buffer, so no example
crosses documents.

One difference of bookkeeping, not of distribution: the original's random state and its
"next target length" run on across files in one process. Here a builder (and its
`random.Random`) is made per input file from `(seed, file name)`, and the first target length
is drawn with the same 5% rule; each file's examples are then independent of which process
reads it and of the files before it.

This module does not import TensorFlow: `serialize_example` writes the `tf.train.Example` wire
format directly (tested against `tf.io.parse_single_example`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class ExampleBuilder:
    """Buffers token-id lines of one document stream and emits packed examples.

    Args:
      max_length: max_seq_length; every example is exactly this long after padding.
      cls_id, sep_id: ids of [CLS] and [SEP].
      rng: the source of the 10% / 50% / 5% draws, consumed in the original's order.

    `add_line(ids)` returns an example when the buffer reached its target; `flush()` (a blank
    line or the end of a document) returns the buffered tail, if any. An example is a pair of
    lists `(input_ids, segment_ids)`, unpadded (see `pad_example`).
    """

    def __init__(self, max_length: int, cls_id: int, sep_id: int, rng: random.Random) -> None:
        if max_length < 5:
            raise ValueError(f"max_seq_length must be at least 5, got {max_length}")
        self.max_length = max_length
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.rng = rng
        self._sentences: list[list[int]] = []
        self._length = 0
        self.target_length = self._next_target_length()

    def _next_target_length(self) -> int:
        # BERT's trick: some short examples so the model also sees short inputs.
        if self.rng.random() < 0.05:
            return self.rng.randint(5, self.max_length)
        return self.max_length

    def add_line(self, ids: list[int]) -> tuple[list[int], list[int]] | None:
        self._sentences.append(ids)
        self._length += len(ids)
        if self._length >= self.target_length:
            return self._create_example()
        return None

    def flush(self) -> tuple[list[int], list[int]] | None:
        if self._length == 0:
            # Lines that tokenised to nothing never make an example (nor draw randomness).
            self._sentences = []
            return None
        return self._create_example()

    def _create_example(self) -> tuple[list[int], list[int]]:
        rng = self.rng
        if rng.random() < 0.1:
            first_target = 100000  # single segment, as in classification inputs
        else:
            first_target = (self.target_length - 3) // 2  # room for [CLS] [SEP] [SEP]

        first: list[int] = []
        second: list[int] = []
        for sentence in self._sentences:
            # The original's post-fix rule (commit 1ed0852): the second test ignores B, so a
            # short later sentence can jump back into A. Kept as is; `and` short-circuits so the
            # coin is only drawn when the first two tests fail, as there.
            if (
                not first
                or len(first) + len(sentence) < first_target
                or (not second and len(first) < first_target and rng.random() < 0.5)
            ):
                first += sentence
            else:
                second += sentence

        first = first[: self.max_length - 2]
        second = second[: max(0, self.max_length - len(first) - 3)]

        self._sentences = []
        self._length = 0
        self.target_length = self._next_target_length()

        input_ids = [self.cls_id, *first, self.sep_id]
        segment_ids = [0] * len(input_ids)
        if second:
            input_ids += [*second, self.sep_id]
            segment_ids += [1] * (len(second) + 1)
        return input_ids, segment_ids


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class ExampleSerializer:
    """`tf.train.Example` bytes for (input_ids, segment_ids) padded to `max_length`.

    Features `input_ids`, `input_mask`, `segment_ids`: int64 lists of exactly `max_length`,
    the original's layout (readable with `FixedLenFeature([max_length], tf.int64)`).
    Hand-encoded (packed varints) because the protobuf builder dominated the writer's time.
    """

    def __init__(self, max_length: int, vocab_size: int) -> None:
        self.max_length = max_length
        self._varints = [_varint(i) for i in range(max(vocab_size, 2))]

    def _feature_entry(self, name: bytes, payload: bytes) -> bytes:
        int64_list = b"\x0a" + _varint(len(payload)) + payload  # Int64List.value, packed
        feature = b"\x1a" + _varint(len(int64_list)) + int64_list  # Feature.int64_list
        entry = (
            b"\x0a" + _varint(len(name)) + name + b"\x12" + _varint(len(feature)) + feature
        )  # map<string, Feature> entry: key = 1, value = 2
        return b"\x0a" + _varint(len(entry)) + entry  # Features.feature

    def serialize(self, input_ids: Sequence[int], segment_ids: Sequence[int]) -> bytes:
        n = len(input_ids)
        pad = self.max_length - n
        if pad < 0 or len(segment_ids) != n:
            raise ValueError(f"example of length {n} does not fit max_length {self.max_length}")
        varints = self._varints
        ids_payload = b"".join([varints[i] for i in input_ids]) + b"\x00" * pad
        mask_payload = b"\x01" * n + b"\x00" * pad
        segment_payload = bytes(segment_ids) + b"\x00" * pad
        features = (
            self._feature_entry(b"input_ids", ids_payload)
            + self._feature_entry(b"input_mask", mask_payload)
            + self._feature_entry(b"segment_ids", segment_payload)
        )
        return b"\x0a" + _varint(len(features)) + features  # Example.features
