"""Serving: SavedModels for TF Serving that take raw text.

| module        | what lives there                                                          |
| ------------- | ------------------------------------------------------------------------- |
| `featurizer`  | raw strings -> `input_ids` / `input_mask` / `segment_ids`, in the graph   |
| `module`      | `ServingModule`: the signatures and each kind's post-processing          |
| `kinds`       | which `ServingModule` each kind of model gets; `save_for_serving`         |
| `saved_model` | the writer: TF Serving's versioned layout, atomic, with assets            |
| `sources`     | the project's checkpoints (pre-trained or fine-tuned) as `ExportSpec`s    |
| `precision`   | the bfloat16 export (a bfloat16 twin of the model); why there is no int8 |
| `loading`     | `load(path)`: an export in Python, with the thread counts it needs        |

The command line is `python -m electra_tf.export` (`electra_tf/cli/export.py`).
"""

from electra_tf.serving.featurizer import TextFeaturizer
from electra_tf.serving.kinds import save_for_serving, serving_module
from electra_tf.serving.loading import load
from electra_tf.serving.module import ServingModule
from electra_tf.serving.saved_model import ExportError, ExportSpec, write_export

__all__ = [
    "ExportError",
    "ExportSpec",
    "ServingModule",
    "TextFeaturizer",
    "load",
    "save_for_serving",
    "serving_module",
    "write_export",
]
