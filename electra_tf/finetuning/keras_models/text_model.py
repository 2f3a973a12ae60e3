"""`ElectraTextModel`: what the Keras encoder, classifier and tagger share.

An encoder (`TransformerEncoder`, scope `electra`) and, optionally, the preprocessing layer that
turns raw text into its inputs. With one attached, `fit`, `evaluate` and `predict` take raw
text as KerasHub's task models do: a `tf.data.Dataset` whose inputs are strings is mapped
through the preprocessor (in parallel, prefetched), and strings in lists or arrays become such
a dataset first. Inputs already featurized (`input_ids`, `input_mask`, `segment_ids`) pass
through unchanged, so the models also train on the command's records or the user's own ids.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras

from electra_tf.finetuning.encoder_sizes import size_of_encoder
from electra_tf.finetuning.keras_models.preprocessing import as_tensor
from electra_tf.modeling import TransformerEncoder
from electra_tf.modeling.dropout import draw_seeds_from
from electra_tf.optimization import AdamWeightDecay, create_optimizer
from electra_tf.serving.module import ServingHead

DEFAULT_BATCH_SIZE = 32


def _leaf_is_text(value: Any) -> bool:
    if isinstance(value, tf.RaggedTensor | tf.Tensor | tf.TensorSpec | tf.RaggedTensorSpec):
        return value.dtype == tf.string
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "USO"
    return isinstance(value, str | bytes)


def is_text(x: Any) -> bool:
    """Whether model inputs `x` (a dataset's element, a tensor, an array, a list, a dict or a
    tuple of these) are raw text rather than features."""
    if isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        return is_text(spec[0] if isinstance(spec, tuple) else spec)
    if isinstance(x, dict):
        return any(is_text(value) for value in x.values())
    if isinstance(x, list | tuple):
        return bool(x) and is_text(x[0])
    return _leaf_is_text(x)


class ElectraTextModel(keras.Model):
    """An encoder and the preprocessor of its raw text (see the module docstring).

    Args:
        encoder: a `TransformerEncoder` (`from_pretrained` loads one).
        preprocessor: an `ElectraPreprocessor` or `ElectraTaggingPreprocessor`; None: the
            model takes features only.
        seed: where given, the dropout masks come from `self.rng`, a generator the model's
            checkpoints hold (`FinetuningModel`'s `seed`), so that a `fit` resumed by Keras's
            `BackupAndRestore` continues them: the uninterrupted fit's weights, bit for bit.
            None: Keras's generators.
    """

    def __init__(
        self,
        encoder: TransformerEncoder,
        preprocessor: Any = None,
        seed: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.seed = seed

    def _seed_dropout(self) -> None:
        """With a `seed`, every dropout of the model (built: each model calls this once its
        layers exist) draws from `self.rng`."""
        if self.seed is not None:
            self.rng = tf.random.Generator.from_seed(self.seed)
            draw_seeds_from(self, self.rng)

    @property
    def model_config(self):
        """The encoder's `ModelConfig`."""
        return self.encoder.config

    def features(self, inputs: Any) -> dict[str, tf.Tensor]:
        """`inputs` as the encoder's features: raw text through the preprocessor."""
        if not is_text(inputs):
            return inputs
        if self.preprocessor is None:
            raise ValueError(f"{self.name}: text inputs need a preprocessor (from_pretrained)")
        return self.preprocessor(inputs)

    # ------------------------------------------------------------------ raw text in Keras' loops
    def _preprocess_element(self, *element):
        pair = getattr(self.preprocessor, "pair", False)
        if pair and not isinstance(element[0], tuple | list | dict):
            element = ((element[0], element[1]), *element[2:])  # (text_a, text_b) unlabelled
        return self.preprocessor(*element)

    def text_dataset(
        self, x: Any, y: Any = None, sample_weight: Any = None, batch_size: int | None = None,
        shuffle: bool = False,
    ) -> tf.data.Dataset:  # fmt: skip
        """Raw text (a dataset, or tensors, arrays and lists with their labels) as a
        dataset of the model's features (and targets), batched."""
        if self.preprocessor is None:
            raise ValueError(f"{self.name}: text inputs need a preprocessor (from_pretrained)")
        if not isinstance(x, tf.data.Dataset):
            parts = [self._input_tensors(x)]
            parts += [as_tensor(v) for v in (y, sample_weight) if v is not None]
            x = tf.data.Dataset.from_tensor_slices(tuple(parts))
            if shuffle:
                x = x.shuffle(x.cardinality(), reshuffle_each_iteration=True)
            x = x.ragged_batch(batch_size or DEFAULT_BATCH_SIZE)
        elif batch_size is not None:
            raise ValueError("batch_size: a dataset is batched already")
        mapped = x.map(self._preprocess_element, num_parallel_calls=tf.data.AUTOTUNE)
        return mapped.prefetch(tf.data.AUTOTUNE)

    def _input_tensors(self, x: Any) -> Any:
        """Tensors of raw text inputs: a dict's values and a pair's two texts each one."""
        if isinstance(x, dict):
            return {key: as_tensor(value) for key, value in x.items()}
        if getattr(self.preprocessor, "pair", False) and isinstance(x, tuple | list):
            return tuple(as_tensor(value) for value in x)
        return as_tensor(x)

    def _data(self, x, y, sample_weight, batch_size, shuffle=False):
        if not is_text(x):
            return x, y, sample_weight, batch_size
        return self.text_dataset(x, y, sample_weight, batch_size, shuffle), None, None, None

    def fit(
        self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
        validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
        sample_weight=None, **kwargs,
    ):  # fmt: skip
        """Keras' `fit`; `x` may be raw text (module docstring), `y` string labels, and so may
        `validation_data`'s."""
        x, y, sample_weight, batch_size = self._data(x, y, sample_weight, batch_size, shuffle)
        validation_data = self._validation(validation_data, kwargs.get("validation_batch_size"))
        return super().fit(
            x, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data,
            shuffle, class_weight, sample_weight, **kwargs,
        )  # fmt: skip

    def _validation(self, data: Any, batch_size: int | None) -> Any:
        """`fit`'s `validation_data` (a dataset, or (x, y[, sample_weight])), raw text mapped."""
        if data is None or isinstance(data, tf.data.Dataset):
            return self.text_dataset(data) if data is not None and is_text(data) else data
        return self.text_dataset(*data, batch_size=batch_size) if is_text(data[0]) else data

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 **kwargs):  # fmt: skip
        """Keras' `evaluate`; `x` may be raw text, `y` string labels."""
        x, y, sample_weight, batch_size = self._data(x, y, sample_weight, batch_size)
        return super().evaluate(x, y, batch_size, verbose, sample_weight, **kwargs)

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        """Keras' `predict`; `x` may be raw text."""
        x, _, _, batch_size = self._data(x, None, None, batch_size)
        return super().predict(x, batch_size, verbose, **kwargs)

    # ------------------------------------------------------------------ training recipe
    def finetuning_optimizer(
        self,
        num_train_steps: int,
        learning_rate: float | None = None,
        layerwise_lr_decay: float | None = None,
        weight_decay_rate: float = 0.01,
        warmup_proportion: float = 0.1,
    ) -> AdamWeightDecay:
        """The fine-tuning command's optimizer for this model: the original's AdamW (no bias
        correction, gradients clipped to norm 1), linear warm-up over `warmup_proportion` of
        `num_train_steps` then linear decay, layer-wise learning-rate decay. The defaults are
        the command's rules by size: 1e-4 and decay 0.8, Large 5e-5 and 0.9."""
        large = size_of_encoder(self.model_config) == "large"
        return create_optimizer(
            self.variable_map(),
            learning_rate or (5e-5 if large else 1e-4),
            num_train_steps,
            weight_decay_rate=weight_decay_rate,
            warmup_proportion=warmup_proportion,
            layerwise_lr_decay_power=layerwise_lr_decay or (0.9 if large else 0.8),
            n_transformer_layers=self.model_config.num_hidden_layers,
        )

    # ------------------------------------------------------------------ names and export
    def variable_map(self) -> dict[str, tf.Variable]:
        """Original checkpoint names -> variables: `electra/...` and the head's
        `task_specific/<task>/...`, as the command's fine-tuned models name them."""
        return {**self.encoder.variable_map("electra"), **self.head_variables()}

    def head_variables(self) -> dict[str, tf.Variable]:
        return {}

    def serving_head(self) -> ServingHead:
        """What `save_for_serving` exports this model as."""
        raise NotImplementedError

    def text_settings(self) -> dict[str, Any]:
        """The preprocessor's settings an export takes over (none without a preprocessor)."""
        p = self.preprocessor
        if p is None:
            return {}
        return {
            "vocab_file": p.vocab_file,
            "max_seq_length": p.max_seq_length,
            "do_lower_case": p.do_lower_case,
            "strip_accents": p.strip_accents,
        }

    def build_twin(self) -> ElectraTextModel:
        """A new model of this one's architecture under the current Keras policy, its
        variables created (the bfloat16 export's twin, `serving.precision`)."""
        raise NotImplementedError

    def _twin_encoder(self) -> TransformerEncoder:
        return TransformerEncoder(self.model_config, name="electra")
