"""pretraining_dataset: the original's FixedLenFeature parsing, int32 batches and clear errors."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data.example_builder import ExampleSerializer
from electra_tf.data.pretraining_input import InputDataError, pretraining_dataset


def _write(path, examples, length):
    serializer = ExampleSerializer(length, vocab_size=100)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for ids in examples:
            writer.write(serializer.serialize(ids, [0] * len(ids)))


def _files(tmp_path, length=16, n_files=3, per_file=5):
    expected = []
    for f in range(n_files):
        examples = [[2, 10 + f, 20 + i, 3] for i in range(per_file)]
        _write(tmp_path / f"pretrain_data.tfrecord-{f}-of-{n_files}", examples, length)
        expected += examples
    return expected


def test_eval_pass_reads_every_record_as_int32(tmp_path):
    expected = _files(tmp_path)
    ds = pretraining_dataset(str(tmp_path / "pretrain_data.tfrecord*"), 5, 16, is_training=False)
    batches = list(ds)
    assert len(batches) == 3
    for batch in batches:
        assert set(batch) == {"input_ids", "input_mask", "segment_ids"}
        for value in batch.values():
            assert value.dtype == tf.int32 and value.shape == (5, 16)
    ids = np.concatenate([b["input_ids"].numpy() for b in batches])
    got = [row[row > 0].tolist() for row in ids]
    assert sorted(got) == sorted(expected)
    mask = np.concatenate([b["input_mask"].numpy() for b in batches])
    assert (mask.sum(axis=1) == 4).all()


def test_training_repeats_shuffles_and_drops_remainder(tmp_path):
    _files(tmp_path)
    ds = pretraining_dataset(str(tmp_path / "*"), 4, 16, is_training=True, seed=1)
    rows = [tuple(r) for b in ds.take(30) for r in b["input_ids"].numpy().tolist()]
    assert len(rows) == 120  # repeats past the 15 records
    assert len(set(rows)) == 15
    first_epoch = rows[:15]
    assert first_epoch != sorted(first_epoch)  # shuffled


def test_comma_separated_globs_and_sharding(tmp_path):
    _files(tmp_path)
    pattern = f"{tmp_path}/*-0-of-3,{tmp_path}/*-2-of-3"
    ds = pretraining_dataset(pattern, 1, 16, is_training=False)
    assert len(list(ds)) == 10
    context = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=1)
    ds = pretraining_dataset(str(tmp_path / "*"), 1, 16, is_training=False, input_context=context)
    ids = [b["input_ids"].numpy()[0, 1] for b in ds]
    assert ids == [11] * 5  # only the second file


def test_fewer_files_than_pipelines_shards_records(tmp_path):
    # One file, two workers: each reads every other record (an empty file shard would leave
    # one worker without data and with a different input graph).
    expected = _files(tmp_path, n_files=1, per_file=6)
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline)
        ds = pretraining_dataset(
            str(tmp_path / "*"), 1, 16, is_training=False, input_context=context
        )
        rows = [b["input_ids"].numpy()[0][:4].tolist() for b in ds]
        assert len(rows) == 3
        seen += rows
    assert sorted(seen) == sorted(expected)
    # Training repeats the record shard forever.
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    ds = pretraining_dataset(str(tmp_path / "*"), 2, 16, is_training=True, input_context=context)
    assert len(list(ds.take(10))) == 10


def test_length_mismatch_names_file_and_both_lengths(tmp_path):
    _files(tmp_path, length=16)
    with pytest.raises(InputDataError, match=r"length 16.*max_seq_length is 128") as err:
        pretraining_dataset(str(tmp_path / "*"), 2, 128)
    assert "pretrain_data.tfrecord-0-of-3" in str(err.value)


def test_no_files_names_the_pattern(tmp_path):
    pattern = str(tmp_path / "nothing*")
    with pytest.raises(InputDataError, match="nothing"):
        pretraining_dataset(pattern, 2, 128)
