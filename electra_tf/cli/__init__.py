"""The command-line programs: argument parsing and exit codes over the library, nothing else.

| command (installed script)          | module                        | also runs as                                |
| ----------------------------------- | ----------------------------- | ------------------------------------------- |
| `electra-pretrain`                  | `pretrain`                    | `python -m electra_tf.pretrain`             |
| `electra-finetune`                  | `finetune`                    | `python -m electra_tf.finetune`             |
| `electra-export`                    | `export`                      | `python -m electra_tf.export`               |
| `electra-convert`                   | `convert`                     | `python -m electra_tf.convert`              |
| `electra-build-tfrecords`           | `build_tfrecords`             | `python data_prep/build_tfrecords.py`       |
| `electra-build-openwebtext-tfrecords` | `build_openwebtext_tfrecords` | `python data_prep/build_openwebtext_tfrecords.py` |
| `electra-learn-vocab`               | `learn_vocab`                 | `python data_prep/learn_vocab.py`           |
| `electra-build-default-corpus`      | `build_default_corpus`        | `python data_prep/build_default_corpus.py`  |

`tfrecord_flags` holds the flags the two TFRecord builders share. Every module also runs with
`python -m electra_tf.cli.<module>`.
"""

# Before any command's imports reach TensorFlow: the environment it reads when it loads
# (its log level, the tf_keras line), set in `tf_startup` (which imports no TensorFlow).
import electra_tf.runtime.tf_startup  # noqa: E402, F401
