"""The pre-training input pipeline: TFRecords -> batches of int32 features.

As the original's `pretrain/pretrain_data.get_input_fn` (docs/faithfulness.md, section 8
'Pre-training data'): when training, the file list is shuffled, files are read by a
parallel interleave (cycle length min(4, files)), records are shuffled 100 at a time, parsed
with `FixedLenFeature([max_seq_length], int64)`, cast to int32 and batched with
`drop_remainder`. Departures (docs/distributed.md): each epoch is shuffled on its own, by
stateless shuffles of (seed, epoch), in blocks of 100 rather than through a buffer of 100, so
that every record comes once per epoch and a resumed run reads what an uninterrupted one
would. Additions: prefetch; under
tf.distribute one record stream for all workers, each keeping its rows of every global batch
(`pretraining_dataset`), so that the layout over workers changes nothing; a resume position;
a comma-separated list of globs; and a clear error, naming the file and both lengths, when the
records were written with another max_seq_length (instead of "Can't parse serialized Example",
original issue #102).
"""

from __future__ import annotations

import json
import os
import random
import re
import struct
from collections.abc import Callable

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


def count_records(files: list[str]) -> int:
    """The number of records in `files`: local files from their record headers
    (`walk_records`), remote ones (gs://...) by reading them once."""
    total = 0
    for path in files:
        if os.path.exists(path):
            total += walk_records(path)
        else:
            total += int(
                tf.data.TFRecordDataset(path).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
            )
    return total


SHUFFLE_BLOCK = 100  # records shuffled together (the original's shuffle buffer size)


def record_stream(
    files: list[str], is_training: bool, seed: int | None, first_epoch: int = 0
) -> tf.data.Dataset:
    """Serialized records: one ordered pass (evaluation), or epoch after epoch (training).

    Training epoch e reads the files in a shuffled order, by a parallel interleave of
    min(4, files) files, and shuffles the records in blocks of 100: the original's reading
    (its shuffle buffer of 100 is a block here), with every shuffle a stateless function of
    (seed, e), so that epoch e is the same records in the same order whether the stream
    started at epoch 0 or at e (a resumed run), and every record comes once before any
    comes twice (the original shuffled across the repeat, which mixes epochs). `seed` None
    draws one at random (the original's nondeterministic reading)."""
    cycle_length = min(4, len(files))
    if seed is None:
        seed = random.randrange(2**31)

    def read(names: tf.data.Dataset) -> tf.data.Dataset:
        return names.interleave(
            tf.data.TFRecordDataset,
            cycle_length=cycle_length,
            # Training reads files in parallel, in a fixed order all the same.
            num_parallel_calls=cycle_length if is_training else None,
            deterministic=True if is_training else None,
        )

    if not is_training:
        return read(tf.data.Dataset.from_tensor_slices(tf.constant(files)))

    def epoch(index: tf.Tensor) -> tf.data.Dataset:
        epoch_seed = tf.stack([tf.constant(seed, tf.int64), index])  # [2]
        order = tf.random.experimental.stateless_shuffle(tf.constant(files), epoch_seed)
        blocks = read(tf.data.Dataset.from_tensor_slices(order)).batch(SHUFFLE_BLOCK).enumerate()

        def shuffle_block(block_index: tf.Tensor, block: tf.Tensor) -> tf.Tensor:
            block_seed = tf.random.experimental.stateless_fold_in(epoch_seed, block_index)
            return tf.random.experimental.stateless_shuffle(block, block_seed)  # [<= 100]

        return blocks.map(shuffle_block).unbatch()

    return tf.data.Dataset.range(first_epoch, 2**62).flat_map(epoch)


def _pipeline_layout(
    input_context: tf.distribute.InputContext | None, seed: int | None
) -> tuple[int, int, int]:
    """(input pipelines, this pipeline's id, replicas in sync) from `input_context`, or one of
    each without one. Several pipelines read one stream, so they need a seed."""
    pipelines, pipeline_id, replicas = 1, 0, 1
    if input_context is not None:
        pipelines = input_context.num_input_pipelines
        pipeline_id = input_context.input_pipeline_id
        replicas = max(input_context.num_replicas_in_sync, pipelines)
    if pipelines > 1 and seed is None:
        raise ValueError("several input pipelines read one stream: they need a seed")
    return pipelines, pipeline_id, replicas


def _batch_decoder(max_seq_length: int) -> Callable[[tf.Tensor], dict[str, tf.Tensor]]:
    """serialized records [batch] -> `FEATURE_NAMES` -> int32 [batch, max_seq_length] each."""
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in FEATURE_NAMES}

    def decode(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        parsed = tf.io.parse_example(serialized, spec)  # [batch_size, max_seq_length] each
        # int64 on disk (the original's format), int32 in the model (TPU-friendly, as there).
        return {name: tf.cast(parsed[name], tf.int32) for name in FEATURE_NAMES}

    return decode


def pretraining_dataset(
    file_pattern: str,
    batch_size: int,
    max_seq_length: int,
    is_training: bool = True,
    seed: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
    start_record: int = 0,
) -> tf.data.Dataset:
    """Batches of {input_ids, input_mask, segment_ids}, each int32 [batch_size, max_seq_length].

    The global batch (batch_size x replicas) is the same rows whatever the layout: every input
    pipeline (one per worker) reads the same seeded record stream, batches it by the global
    batch and keeps its own consecutive rows, which its replicas take in turn. One worker with
    the global batch, or several with a share each, so see the same examples at every step;
    each record is consumed once per epoch across workers; the position of step s is record
    s x global batch of the stream, whatever the layout (`start_record`, on resume). Reading
    is repeated on every worker; parsing is not (a record is parsed by the worker that keeps
    it). Several pipelines need a seed (one stream for all).

    Args:
      file_pattern: glob, or comma-separated globs, of pre-training TFRecords.
      batch_size: per-replica batch size (the batch the dataset yields).
      max_seq_length: length the records were written with (checked on the first record).
      is_training: epochs of shuffled files and records (`record_stream`) without end;
        otherwise one ordered pass.
      seed: shuffling seed (None: nondeterministic, as the original).
      input_context: from `distribute_datasets_from_function`: the number of input pipelines
        (workers), this one's id, and the number of replicas in sync.
      start_record: records of the training stream already consumed (a run resumed at
        step s: s x the global batch); the records before it in its epoch are read again,
        not parsed.
    """
    files = match_files(file_pattern)
    check_record_length(files, max_seq_length)
    pipelines, pipeline_id, replicas = _pipeline_layout(input_context, seed)
    rows = batch_size * replicas // pipelines  # this pipeline's rows of each global batch
    first_epoch, skip = 0, 0
    if start_record and is_training:
        # Whole epochs are not read again: the stream starts at the position's epoch.
        first_epoch, skip = divmod(start_record, count_records(files))
    records = record_stream(files, is_training, seed, first_epoch)
    if skip:
        records = records.skip(skip)
    # [batch_size x replicas] serialized records: the global batch, the same on every worker.
    batches = records.batch(batch_size * replicas, drop_remainder=True)
    if pipelines > 1:
        first = pipeline_id * rows
        batches = batches.map(lambda batch: batch[first : first + rows])  # [rows]
    if rows != batch_size:
        # This worker's replicas take its rows in turn, batch_size each.
        batches = batches.rebatch(batch_size, drop_remainder=True)
    dataset = batches.map(_batch_decoder(max_seq_length), num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)
