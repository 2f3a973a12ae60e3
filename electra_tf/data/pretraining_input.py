"""The pre-training input pipeline: TFRecords -> batches of int32 features.

As the original's `pretrain/pretrain_data.get_input_fn` (docs/faithfulness.md, section 8
'Pre-training data'): when training, the
file list is repeated and shuffled, files are read by a parallel interleave (cycle length
min(4, files)), records are shuffled with a buffer of 100, parsed with
`FixedLenFeature([max_seq_length], int64)`, cast to int32 and batched with `drop_remainder`.
Additions: prefetch, sharding by `input_context.input_pipeline_id` under tf.distribute, a
comma-separated list of globs, and a clear error, naming the file and both lengths, when the
records were written with another max_seq_length (instead of "Can't parse serialized Example",
original issue #102).
"""

from __future__ import annotations

import json
import os
import re
import struct

import tensorflow as tf

from electra_tf.data.tfrecord_builder import SUMMARY_FILE

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")


class InputDataError(ValueError):
    """Input files that cannot feed the model; the message names the file or pattern."""


def match_files(file_pattern: str) -> list[str]:
    """Sorted files matching a comma-separated list of globs."""
    files: list[str] = []
    for pattern in (p.strip() for p in file_pattern.split(",")):
        if pattern:
            files.extend(tf.io.gfile.glob(pattern))
    files = sorted(set(files))
    if not files:
        raise InputDataError(f"no files match the pattern {file_pattern!r}")
    return files


def check_record_length(files: list[str], max_seq_length: int) -> None:
    """Reads the first record found and checks each feature's length up front."""
    for path in files:
        try:
            first = [raw.numpy() for raw in tf.data.TFRecordDataset(path).take(1)]
        except tf.errors.DataLossError as e:
            raise InputDataError(f"{path}: not a readable TFRecord file ({e.message})") from None
        for raw in first:
            try:
                example = tf.train.Example.FromString(raw)
            except Exception as e:  # protobuf's DecodeError
                raise InputDataError(f"{path}: the first record is not a tf.train.Example") from e
            for name in FEATURE_NAMES:
                if name not in example.features.feature:
                    raise InputDataError(f"{path}: records have no feature {name!r}")
                length = len(example.features.feature[name].int64_list.value)
                if length != max_seq_length:
                    raise InputDataError(
                        f"{path}: records hold {name} of length {length}, but "
                        f"max_seq_length is {max_seq_length}; rebuild the data with "
                        f"--max-seq-length {max_seq_length} or set max_seq_length={length}"
                    )
            return  # one record is enough: a build writes one length
    raise InputDataError(f"no records in the {len(files)} file(s) matched, e.g. {files[0]}")


def walk_records(path: str) -> int:
    """The number of records in a local TFRecord file, from its record headers alone
    (length, crc, data, crc): a truncated file, or bytes that are not TFRecords, raise
    InputDataError naming the file and the offset. CRCs are checked by the reader later."""
    size = os.path.getsize(path)
    offset, count = 0, 0
    with open(path, "rb") as f:
        while offset < size:
            header = f.read(12)
            if len(header) < 12:
                raise InputDataError(
                    f"{path}: truncated record header at offset {offset} (file size {size})"
                )
            (length,) = struct.unpack("<Q", header[:8])
            end = offset + 12 + length + 4
            if end > size:
                raise InputDataError(
                    f"{path}: not a complete TFRecord file: the record at offset {offset} "
                    f"claims {length} bytes, past the end of the file ({size} bytes); "
                    "truncated, or not a TFRecord file"
                )
            f.seek(end)
            offset, count = end, count + 1
    return count


def check_token_ids(files: list[str], vocab_size: int, records_per_file: int = 64) -> None:
    """The first records of each file hold token ids inside the model's vocabulary and an
    input_mask of 0s and 1s, and the builder's summary beside them agrees. On CPU an id >= vocab_size fails deep inside the
    embedding gather; on GPU TensorFlow's gather returns zeros and training goes on silently."""
    summaries = {os.path.join(os.path.dirname(path), SUMMARY_FILE) for path in files}
    for summary in sorted(p for p in summaries if os.path.isfile(p)):
        try:
            with open(summary, encoding="utf-8") as f:
                built = json.load(f).get("stats", {}).get("vocab_size")
        except (OSError, ValueError, AttributeError):
            continue  # an unreadable summary: the records below still decide
        if isinstance(built, int) and built > vocab_size:
            raise InputDataError(
                f"{summary}: the data was built with a {built}-entry vocabulary, but the model's "
                f"vocab_size is {vocab_size}; use the data's vocabulary (vocab_file) or rebuild"
            )
    for path in files:
        if not os.path.exists(path):
            continue  # remote (gs://...): read only by the pipeline
        for index, raw in enumerate(_first_records(path, records_per_file)):
            features = tf.train.Example.FromString(raw).features.feature
            ids = features["input_ids"].int64_list.value
            largest = max(ids, default=0)
            if largest >= vocab_size or min(ids, default=0) < 0:
                raise InputDataError(
                    f"{path}: record {index} holds token id {largest}, outside the model's "
                    f"vocabulary (vocab_size {vocab_size}); the data was built with another "
                    "vocabulary: use its vocab.txt (vocab_file) or rebuild the data"
                )
            odd = set(features["input_mask"].int64_list.value) - {0, 1}
            if odd:
                # The model reads the mask as "== 1": any other value would act as padding.
                raise InputDataError(
                    f"{path}: record {index} holds input_mask value(s) {sorted(odd)}; a mask "
                    "is 1 for tokens and 0 for padding"
                )


def _first_records(path: str, count: int) -> list[bytes]:
    """Up to `count` records from the start of `path`, stopping before a corrupt one (which the
    run names, with its offset, when it reaches it)."""
    records = []
    try:
        for raw in tf.data.TFRecordDataset(path).take(count):
            records.append(raw.numpy())
    except tf.errors.DataLossError:
        pass
    return records


def check_input_files(files: list[str], max_seq_length: int, vocab_size: int | None = None) -> None:
    """Before a model is built: every local file is whole (record headers walked to the end),
    its first record parses with the expected lengths, at least one record exists, and (given
    `vocab_size`) the first records' token ids fit the vocabulary. Each failure is an
    InputDataError naming the file."""
    total = 0
    remote = [path for path in files if not os.path.exists(path)]  # gs://...: not walked
    if remote:
        check_record_length(remote, max_seq_length)
        total += 1
    for path in files:
        if path not in remote:
            records = walk_records(path)
            total += records
            if records:
                check_record_length([path], max_seq_length)
    if total == 0:
        raise InputDataError(
            f"no records in the {len(files)} file(s) matched, e.g. {files[0]}; "
            "rebuild the data (data_prep/build_tfrecords.py)"
        )
    if vocab_size is not None:
        check_token_ids(files, vocab_size)


def locate_corrupt_record(files: list[str]) -> str | None:
    """After a DataLossError mid-run: the first file that fails to read in full, and
    TensorFlow's description of where (it names the byte offset, not the file)."""
    for path in files:
        try:
            tf.data.TFRecordDataset(path).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
        except tf.errors.DataLossError as e:
            where = re.search(r"(corrupted|truncated) record at \d+", e.message)
            return f"{path}: {where.group(0) if where else e.message.splitlines()[-1]}"
    return None


def pretraining_dataset(
    file_pattern: str,
    batch_size: int,
    max_seq_length: int,
    is_training: bool = True,
    seed: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """Batches of {input_ids, input_mask, segment_ids}, each int32 [batch_size, max_seq_length].

    Args:
      file_pattern: glob, or comma-separated globs, of pre-training TFRecords.
      batch_size: per-replica batch size (the batch the dataset yields).
      max_seq_length: length the records were written with (checked on the first record).
      is_training: repeat and shuffle (files and records); otherwise one ordered pass.
      seed: shuffling seed (None: nondeterministic, as the original).
      input_context: from `distribute_datasets_from_function`; each input pipeline reads
        every `num_input_pipelines`-th file (every n-th record when there are fewer files).
    """
    files = match_files(file_pattern)
    check_record_length(files, max_seq_length)
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(files))
    pipelines = input_context.num_input_pipelines if input_context is not None else 1
    # Shard by file when every pipeline gets at least one; with fewer files than pipelines,
    # every pipeline reads all files and keeps every n-th record. (An empty shard would leave
    # a worker without data, and its input a different graph from the others'.)
    shard_files = 1 < pipelines <= len(files)
    if shard_files:
        dataset = dataset.shard(pipelines, input_context.input_pipeline_id)
    if is_training:
        dataset = dataset.repeat().shuffle(len(files), seed=seed)
    cycle_length = min(4, len(files))
    dataset = dataset.interleave(
        tf.data.TFRecordDataset,
        cycle_length=cycle_length,
        # Evaluation reads in order; training reads in parallel, and out of order (the
        # original's `sloppy=is_training`) unless a seed asks for reproducibility.
        num_parallel_calls=cycle_length if is_training else None,
        deterministic=(seed is not None) if is_training else None,
    )
    if pipelines > 1 and not shard_files:
        dataset = dataset.shard(pipelines, input_context.input_pipeline_id)
    if is_training:
        dataset = dataset.shuffle(100, seed=seed)
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in FEATURE_NAMES}

    def decode(record: tf.Tensor) -> dict[str, tf.Tensor]:
        parsed = tf.io.parse_single_example(record, spec)
        # int64 on disk (the original's format), int32 in the model (TPU-friendly, as there).
        return {name: tf.cast(parsed[name], tf.int32) for name in FEATURE_NAMES}

    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
