"""electra-tf: ELECTRA pre-training and fine-tuning in TensorFlow 2 / tf_keras, faithful to
google-research/electra."""

__version__ = "0.1.0"

# The public API (electra_tf/api.py), imported on first use: `import electra_tf` stays cheap.
from electra_tf.api import PUBLIC as _PUBLIC  # noqa: E402

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    from electra_tf.api import public_object

    return public_object(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
