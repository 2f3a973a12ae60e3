import numpy as np
import tensorflow as tf

from electra_tf.data.tfrecord_io import TFRecordWriter


def test_records_read_back_by_tensorflow(tmp_path):
    path = str(tmp_path / "x.tfrecord")
    rng = np.random.default_rng(0)
    records = [rng.bytes(int(n)) for n in (0, 1, 7, 300, 70_000)]
    with TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    # TFRecordDataset verifies both CRCs of every record and fails on a mismatch.
    read = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    assert read == records


def test_bytes_equal_tensorflow_writer(tmp_path):
    ours, theirs = str(tmp_path / "a"), str(tmp_path / "b")
    with TFRecordWriter(ours) as writer:
        writer.write(b"hello electra")
    with tf.io.TFRecordWriter(theirs) as writer:
        writer.write(b"hello electra")
    assert open(ours, "rb").read() == open(theirs, "rb").read()
