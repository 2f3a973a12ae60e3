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


def test_comma_separated_globs(tmp_path):
    _files(tmp_path)
    pattern = f"{tmp_path}/*-0-of-3,{tmp_path}/*-2-of-3"
    ds = pretraining_dataset(pattern, 1, 16, is_training=False)
    assert len(list(ds)) == 10


def _rows(ds, steps):
    return [b["input_ids"].numpy()[:, :4].tolist() for b in ds.take(steps)]


@pytest.mark.parametrize("is_training", [False, True])
def test_pipelines_keep_their_rows_of_one_global_batch(tmp_path, is_training):
    # Three workers with 2 rows each read the stream of one worker with 6: each keeps its
    # consecutive rows of every global batch (the replica order of tf.distribute).
    _files(tmp_path, n_files=2, per_file=9)
    pattern = str(tmp_path / "*")
    whole = _rows(pretraining_dataset(pattern, 6, 16, is_training, seed=3), 3)
    for pipeline in range(3):
        context = tf.distribute.InputContext(3, pipeline, num_replicas_in_sync=3)
        part = _rows(pretraining_dataset(pattern, 2, 16, is_training, 3, context), 3)
        assert part == [batch[2 * pipeline : 2 * pipeline + 2] for batch in whole]
    # One worker with two replicas: they take its rows in turn, 2 each.
    context = tf.distribute.InputContext(1, 0, num_replicas_in_sync=2)
    halves = _rows(pretraining_dataset(pattern, 3, 16, is_training, 3, context), 4)
    assert [halves[0] + halves[1], halves[2] + halves[3]] == whole[:2]


def test_training_epochs_hold_every_record_once_and_resume_at_a_record(tmp_path):
    _files(tmp_path, n_files=2, per_file=6)
    pattern = str(tmp_path / "*")
    stream = [r for b in _rows(pretraining_dataset(pattern, 4, 16, True, seed=5), 9) for r in b]
    epochs = [stream[:12], stream[12:24], stream[24:]]
    assert all(sorted(map(tuple, e)) == sorted(map(tuple, epochs[0])) for e in epochs)
    assert len({tuple(r) for r in epochs[0]}) == 12 and epochs[0] != epochs[1]
    # A resume at record 16 (epoch 1, record 4) continues the same stream.
    resumed = pretraining_dataset(pattern, 4, 16, True, seed=5, start_record=16)
    assert [r for b in _rows(resumed, 5) for r in b] == stream[16:]


def test_length_mismatch_names_file_and_both_lengths(tmp_path):
    _files(tmp_path, length=16)
    with pytest.raises(InputDataError, match=r"length 16.*max_seq_length is 128") as err:
        pretraining_dataset(str(tmp_path / "*"), 2, 128)
    assert "pretrain_data.tfrecord-0-of-3" in str(err.value)


def test_no_files_names_the_pattern(tmp_path):
    pattern = str(tmp_path / "nothing*")
    with pytest.raises(InputDataError, match="nothing"):
        pretraining_dataset(pattern, 2, 128)
