"""Pre-training TFRecords from OpenWebText, as the original's build_openwebtext_pretraining_dataset.py.

Expects $DATA_DIR/openwebtext/* (the OWT tar sub-archives, e.g. urlsf_subset00-1_data.xz) and
$DATA_DIR/vocab.txt; writes $DATA_DIR/pretrain_tfrecords. Each archive member is one document
(blank lines skipped), the original's mode. Archives are streamed, not extracted to disk.

    python data_prep/build_openwebtext_tfrecords.py --data-dir $DATA_DIR --num-processes 2
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from electra_tf.cli.tfrecord_flags import add_build_flags, options_from_flags, run_build  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="Holds openwebtext/ and vocab.txt.")
    add_build_flags(parser, one_doc_default=True)
    args = parser.parse_args(argv)
    options = options_from_flags(
        args,
        corpus_dir=os.path.join(args.data_dir, "openwebtext"),
        vocab_file=os.path.join(args.data_dir, "vocab.txt"),
        output_dir=os.path.join(args.data_dir, "pretrain_tfrecords"),
    )
    return run_build(options)


if __name__ == "__main__":
    sys.exit(main())
