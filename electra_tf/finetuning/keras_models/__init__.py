"""Fine-tuning from Keras: models a user fits on raw text with `model.fit`, from any pre-trained
home, exported with the user's label names.

| module          | what lives there                                                        |
| --------------- | ----------------------------------------------------------------------- |
| `features`      | the command's featurization in the graph: texts and pairs, words        |
| `preprocessing` | `ElectraPreprocessor`, `ElectraTaggingPreprocessor`: Keras layers, text and string labels -> inputs and targets |
| `text_model`    | `ElectraTextModel`: encoder + preprocessor, `fit` / `predict` on raw text, the command's optimizer |
| `models`        | `ElectraEncoder`, `ElectraClassifier`, `ElectraTagger`, each `from_pretrained` |
| `pretrained`    | what `from_pretrained` reads: the encoder's weights, the vocabulary and casing |

This package sits above `checkpoints` and `serving` (tests/test_layering.py): `from_pretrained`
reads every weight format, and the models tell `save_for_serving` how they serve
(`serving.module.ServingHead`) without `serving` importing them.
"""

from electra_tf.finetuning.keras_models.models import (
    ElectraClassifier,
    ElectraEncoder,
    ElectraTagger,
    TagAccuracy,
)
from electra_tf.finetuning.keras_models.preprocessing import (
    ElectraPreprocessor,
    ElectraTaggingPreprocessor,
)
from electra_tf.finetuning.keras_models.text_model import ElectraTextModel

__all__ = [
    "ElectraClassifier",
    "ElectraEncoder",
    "ElectraPreprocessor",
    "ElectraTagger",
    "ElectraTaggingPreprocessor",
    "ElectraTextModel",
    "TagAccuracy",
]
