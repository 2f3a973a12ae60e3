"""electra-tf: ELECTRA pre-training and fine-tuning in TensorFlow 2 / tf_keras, faithful to
google-research/electra."""

__version__ = "0.1.0"
