"""The `tf.Module` that a SavedModel for TF Serving is made of: signatures and post-processing.

One `ServingModule` wraps a Keras model (through a `predict(features) -> raw outputs` function),
a `TextFeaturizer` and the vocabulary, and exposes three signatures (four for `electric`):

- `serving_default`: raw UTF-8 strings, `text` [batch] (or `text_a`, `text_b` [batch] for pair
  tasks), tokenized in the graph exactly as in training.
- `encode_ids`: `input_ids`, `input_mask`, `segment_ids` int32 [batch, seq_len], for clients that
  tokenize themselves; the same outputs.
- `tokenize`: the text inputs -> the three id tensors and the WordPiece `tokens` (debugging).
- `score_text` (kind `electric` only): `text` [batch] -> Electric's scores, the same function
  as its `serving_default`, under the name a scoring client asks for.

The outputs depend on `kind` (each [batch, ...], so TF Serving's row format works):

- `discriminator`: `replaced_probability` [B, L] (sigmoid of the replaced-token logit, 0 on
  padding), `mean_replaced_probability` / `max_replaced_probability` [B] over the real tokens
  other than [CLS] / [SEP] (0 when there are none): a fluency / error-detection score.
- `electric`: the discriminator of an Electric model, whose head outputs an energy E, not a
  replaced-token logit (sigmoid(E) is no probability of anything: Electric's noise logit adds
  log q and a prior that only training has). `token_scores` [B, L]: -E, Electric's estimate of
  log p(token | the rest), at the scored tokens (real, not [CLS] / [SEP] / [MASK]) and 0
  elsewhere; `scored` [B, L] (1 at those tokens); `sentence_score` [B], their sum;
  `num_scored` [B]; `input_ids` [B, L]. One forward pass scores every token
  (`pretraining.electric_scoring.score_features`, as the Keras-side `score_text`).
- `encoder`: `sequence_output` [B, L, H], `cls_output` [B, H].
- `classification`: `probabilities` [B, C], `label_id` [B], `label` [B] (string), `logits`.
- `regression`: `score` [B], the head's output mapped back to the label scale.
- `qa`: `start_index`, `end_index` [B] (token positions; 0/0 = no answer, the [CLS] slot),
  `answer_text` [B] (WordPiece tokens joined, `##` merged: lower-cased when the vocabulary is),
  `span_log_prob` [B], `answerable_logit` [B].
- `tagging`: `tag_id` [B, L], `tag` [B, L] (string; "" off the words), `is_word_start` [B, L]
  (the original tags only a word's first sub-token).

Every kind also returns `input_mask` [B, L] and, except the encoder, `tokens` [B, L].

Speed: the signatures pass the encoder `InferenceOptions` (`modeling.utils`; `predict` takes
them): its LayerNorms are traced in the form that Grappler's oneDNN remapper fuses; with the dense layers on 2-D rows and the attention
scores scaled after the product, every matmul of the encoder runs as one oneDNN kernel with its
bias, GELU, scale or mask fused (`tests/test_serving_graph.py` checks the optimized graph).
The encoder runs each layer on `query_blocks` groups of positions side by side (default 2:
with intra-op threads 1 and inter-op 2, each group's kernels run on their own core).
Those are rewrites at load time: the SavedModel holds standard ops only. `jit_compile=True`
instead compiles the model's forward pass with XLA (an experimental flag in TF Serving; see
the README's serving section).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import tensorflow as tf

from electra_tf.config import DEFAULT_QUERY_BLOCKS, query_blocks_problem
from electra_tf.modeling.utils import InferenceOptions
from electra_tf.serving.featurizer import TextFeaturizer
from electra_tf.serving.saved_model import weight_dtypes

KINDS = ("discriminator", "electric", "encoder", "classification", "regression", "qa", "tagging")

RawOutputs = dict[str, tf.Tensor]
# The model's forward pass: features (int [B, L] ids) and the encoder's options -> raw outputs.
Predict = Callable[[dict[str, tf.Tensor], InferenceOptions], RawOutputs]


@dataclasses.dataclass(frozen=True)
class ServingHead:
    """What a model held in Python exports as, told by the model itself: `save_for_serving`
    exports any model with a `serving_head()` method returning one (the Keras models of
    `electra_tf.finetuning.keras_models`), whatever its class.

    `kind`: the `ServingModule` kind (one of KINDS); `predict`: its forward pass; `pair`,
    `label_names`: as `ServingModule`'s; `single_segment_id`: the featurizer's
    (`pack_features`; 1 for the original's tagging features).
    """

    kind: str
    predict: Predict
    pair: bool = False
    label_names: tuple[str, ...] | None = None
    single_segment_id: int = 0


def _ids_spec() -> dict[str, tf.TensorSpec]:
    return {
        name: tf.TensorSpec([None, None], tf.int32, name=name)
        for name in ("input_ids", "input_mask", "segment_ids")
    }


def checked_text(text_a: tf.Tensor, text_b: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor | None]:
    """The text inputs, after run-time checks: TF Serving does not enforce a signature's
    [None] shape (a [2, 2] input was flattened into a batch of 4; a static rank check is folded
    away by the graph optimizer, EnsureShape is not), and the two texts of a pair must line up.
    """
    text_a = tf.ensure_shape(text_a, [None])  # "Shape of tensor text [2,2] is not compatible"
    if text_b is None:
        return text_a, None
    text_b = tf.ensure_shape(text_b, [None])
    same = tf.debugging.assert_equal(
        tf.shape(text_a),
        tf.shape(text_b),
        message="text_a and text_b must have the same batch size",
    )
    with tf.control_dependencies([same]):
        return tf.identity(text_a), tf.identity(text_b)


def _traced_once(predict: Callable[[dict[str, tf.Tensor]], RawOutputs]):
    """`predict` as one graph function for ids of any [batch, length], traced at the first call
    (by the feature names it gets), which every signature then calls: the SavedModel holds its
    body, and the constant kernels in it, once."""
    function = None

    def call(features: dict[str, tf.Tensor]) -> RawOutputs:
        nonlocal function
        if function is None:
            spec = {k: tf.TensorSpec([None, None], v.dtype) for k, v in features.items()}
            function = tf.function(predict, input_signature=[spec], autograph=False)
        return function(features)

    return call


class ServingModule(tf.Module):
    """Signatures for one exported model.

    Args:
        predict: (features dict, `InferenceOptions`) -> raw model outputs (see each `_<kind>`
            method for the keys); it passes the options to the model's encoder, which traces
            its serving forms with them (`inference_options` below).
        model: the Keras model `predict` uses (its variables are saved).
        featurizer: raw text -> features, in the graph.
        vocab_tokens: the vocabulary in id order (for `tokens` and QA answer text).
        kind: one of KINDS.
        pair: whether `serving_default` takes `text_a` and `text_b` instead of `text`.
        label_names: class names (classification) or tag names (tagging).
        score_scale, score_offset: regression output = prediction * scale + offset.
        max_answer_length: QA spans longer than this many tokens are not candidates.
        jit_compile: compile `predict` (the model, not the tokenizer or the string outputs,
            which XLA cannot compile) with XLA. TF Serving runs such a model only with
            `--xla_cpu_compilation_enabled=true`, and XLA compiles once per input shape.
        constant_kernels: the encoder's dense kernels are constants of the
            signatures' graph (`InferenceOptions.constant_kernels`; the bfloat16 export, where
            only then its fused products run on AMX), traced once for all signatures; the
            SavedModel then holds as variables only what the graph still reads.
        query_blocks: the encoder runs every layer on this many consecutive groups of
            positions, as independent ops that share only the attention's keys and values
            (`TransformerEncoder`; the same numbers). A model server whose inter-op pool has
            a thread per group and whose kernels run single-threaded (intra-op 1) then keeps
            one core per group busy, where one kernel split over two cores mostly waits at
            small sizes. 1 = one group. Not with `jit_compile` (XLA schedules the compiled
            model itself): there it is 1.

    Attributes:
        inference_options: what `predict` gets: `query_blocks` groups, and the LayerNorms in
            the form Grappler fuses, except under `jit_compile` (XLA fuses the Keras form).
    """

    def __init__(
        self,
        predict: Predict,
        model: tf.Module,
        featurizer: TextFeaturizer,
        vocab_tokens: Sequence[str],
        kind: str,
        pair: bool = False,
        label_names: Sequence[str] | None = None,
        score_scale: float = 1.0,
        score_offset: float = 0.0,
        max_answer_length: int = 30,
        jit_compile: bool = False,
        query_blocks: int = DEFAULT_QUERY_BLOCKS,
        constant_kernels: bool = False,
        name: str = "electra_serving",
    ):
        super().__init__(name=name)
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r} is not one of {KINDS}")
        if kind in ("classification", "tagging") and not label_names:
            raise ValueError(f"kind {kind!r} needs label_names")
        self.jit_compile = jit_compile
        problem = query_blocks_problem(query_blocks)
        if problem:
            raise ValueError(f"query_blocks: {problem}")
        self.inference_options = InferenceOptions(
            fused_layer_norms=not jit_compile,
            query_blocks=1 if jit_compile else query_blocks,
            constant_kernels=constant_kernels and not jit_compile,
        )
        options = self.inference_options

        def bound(features):
            return predict(features, options)

        # Only the model's forward pass: the featurizer's string ops and the post-processing's
        # token strings stay outside the XLA cluster.
        if jit_compile:
            self._predict = tf.function(bound, jit_compile=True, autograph=False)
        elif options.constant_kernels:
            self._predict = _traced_once(bound)
        else:
            self._predict = bound
        # Only the variables are tracked, not the Keras model: the signatures capture them, and
        # this avoids Keras' own SavedModel serialisation (its traced call functions).
        self.model_variables = list(model.variables)
        # What export.json reports: every weight of the model, constants included.
        self.weight_counts = weight_dtypes(self.model_variables)
        self.featurizer = featurizer
        self.kind = kind
        self.pair = pair
        self.vocab_tokens = tf.constant(list(vocab_tokens))
        self.label_names = tf.constant(list(label_names or [""]))
        self.score_scale = score_scale
        self.score_offset = score_offset
        self.max_answer_length = max_answer_length
        self.special_ids = tf.constant(
            [featurizer.cls_id, featurizer.sep_id, 0], tf.int32
        )  # [CLS], [SEP], [PAD]

    @property
    def query_blocks(self) -> int:
        """The encoder's query groups in the signatures (1 under `jit_compile`)."""
        return self.inference_options.query_blocks

    # ------------------------------------------------------------------ signatures
    def signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        text = tf.TensorSpec([None], tf.string, name="text")
        text_a = tf.TensorSpec([None], tf.string, name="text_a")
        text_b = tf.TensorSpec([None], tf.string, name="text_b")
        # No autograph: nothing here branches on tensors, and converting the Keras layers'
        # Python costs more than the rest of the export.
        function = functools.partial(tf.function, autograph=False)
        if self.pair:
            serve = function(lambda text_a, text_b: self.serve_text(text_a, text_b))
            tokenize = function(lambda text_a, text_b: self.tokenize_text(text_a, text_b))
            specs = (text_a, text_b)
        else:
            serve = function(lambda text: self.serve_text(text))
            tokenize = function(lambda text: self.tokenize_text(text))
            specs = (text,)
        encode = function(
            lambda input_ids, input_mask, segment_ids: self.outputs(
                {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
            )
        )
        signatures = {
            "serving_default": serve.get_concrete_function(*specs),
            "encode_ids": encode.get_concrete_function(**_ids_spec()),
            "tokenize": tokenize.get_concrete_function(*specs),
        }
        if self.kind == "electric":
            signatures["score_text"] = signatures["serving_default"]
        if self.inference_options.constant_kernels:  # save only the variables still read
            read = {id(t) for fn in signatures.values() for t in fn.captured_inputs}
            self.model_variables = [v for v in self.model_variables if id(v.handle) in read]
        return signatures

    def tokenize_text(self, text_a: tf.Tensor, text_b: tf.Tensor | None = None) -> RawOutputs:
        features = self.featurizer(*checked_text(text_a, text_b))
        return {**features, "tokens": self._tokens(features)}

    def serve_text(self, text_a: tf.Tensor, text_b: tf.Tensor | None = None) -> RawOutputs:
        return self.outputs(self.featurizer(*checked_text(text_a, text_b)))

    def outputs(self, features: dict[str, tf.Tensor]) -> RawOutputs:
        # The ids' rank, stated inside the function: a Session (TF Serving's path) optimizes a
        # SavedModel's functions without the signature's shapes, and the oneDNN LayerNorm and
        # attention fusions need known ranks (without this, the embedding LayerNorm and every
        # attention product stayed unfused there).
        features = {
            k: tf.ensure_shape(tf.cast(v, tf.int32), [None, None]) for k, v in features.items()
        }
        raw = self._predict(features)
        result = getattr(self, f"_{self.kind}")(features, raw)
        result["input_mask"] = features["input_mask"]
        if self.kind != "encoder":
            result["tokens"] = self._tokens(features)
        return result

    # ------------------------------------------------------------------ helpers
    def _tokens(self, features: dict[str, tf.Tensor]) -> tf.Tensor:
        tokens = tf.gather(self.vocab_tokens, features["input_ids"])  # [B, L]
        return tf.where(features["input_mask"] > 0, tokens, "")

    def _real_tokens(self, features: dict[str, tf.Tensor]) -> tf.Tensor:
        """[B, L] bool: real tokens that are not [CLS] / [SEP]."""
        ids = features["input_ids"]
        special = tf.reduce_any(ids[:, :, None] == self.special_ids, axis=-1)  # [B, L]
        return tf.logical_and(features["input_mask"] > 0, tf.logical_not(special))

    # ------------------------------------------------------------------ per kind
    def _discriminator(self, features, raw):
        real = tf.cast(self._real_tokens(features), tf.float32)
        mask = tf.cast(features["input_mask"], tf.float32)
        probs = tf.sigmoid(tf.cast(raw["logits"], tf.float32)) * mask  # [B, L]
        count = tf.reduce_sum(real, axis=-1)
        mean = tf.math.divide_no_nan(tf.reduce_sum(probs * real, axis=-1), count)
        return {
            "replaced_probability": probs,
            "mean_replaced_probability": mean,
            # Probabilities are >= 0, so masking with 0 gives 0 for a row without real tokens.
            "max_replaced_probability": tf.reduce_max(probs * real, axis=-1),
        }

    def _electric(self, features, raw):
        # `raw` is `electric_scoring.score_features`' output: the scores are computed there,
        # once for the Keras side and the graph alike.
        return {
            "token_scores": tf.cast(raw["token_scores"], tf.float32),  # [B, L]
            "scored": tf.cast(raw["scored"], tf.int32),  # [B, L]
            "sentence_score": tf.cast(raw["sentence_scores"], tf.float32),  # [B]
            "num_scored": tf.cast(raw["num_scored"], tf.int32),  # [B]
            "input_ids": features["input_ids"],  # [B, L]
        }

    def _encoder(self, features, raw):
        return {
            "sequence_output": tf.cast(raw["sequence_output"], tf.float32),
            "cls_output": tf.cast(raw["cls_output"], tf.float32),
        }

    def _classification(self, features, raw):
        logits = tf.cast(raw["logits"], tf.float32)
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label_id": label_id,
            "label": tf.gather(self.label_names, label_id),
        }

    def _regression(self, features, raw):
        prediction = tf.cast(raw["predictions"], tf.float32)
        return {"score": prediction * self.score_scale + self.score_offset}

    def _tagging(self, features, raw):
        tag_id = tf.argmax(tf.cast(raw["logits"], tf.float32), -1, output_type=tf.int32)
        tokens = tf.gather(self.vocab_tokens, features["input_ids"])  # [B, L]
        continuation = tf.strings.regex_full_match(tokens, "##.*")
        word_start = tf.logical_and(self._real_tokens(features), tf.logical_not(continuation))
        return {
            "tag_id": tag_id,
            "tag": tf.where(word_start, tf.gather(self.label_names, tag_id), ""),
            "is_word_start": word_start,
        }

    def _qa(self, features, raw):
        # Beam outputs of the joint head: start [B, K], end [B, K, K] (ends per start).
        start_lp = tf.cast(raw["start_top_log_probs"], tf.float32)
        start_idx = tf.cast(raw["start_top_index"], tf.int32)
        end_lp = tf.cast(raw["end_top_log_probs"], tf.float32)
        end_idx = tf.cast(raw["end_top_index"], tf.int32)
        k = tf.shape(start_idx)[1]
        starts = tf.broadcast_to(start_idx[:, :, None], tf.shape(end_idx))  # [B, K, K]
        # A candidate must lie in the context (segment 1, real) and be well-ordered and short,
        # as the original's prediction writer filters them.
        context = tf.logical_and(features["segment_ids"] > 0, features["input_mask"] > 0)
        in_context_start = tf.gather(context, starts, batch_dims=1)  # [B, K, K]
        in_context_end = tf.gather(context, end_idx, batch_dims=1)  # [B, K, K]
        length = end_idx - starts + 1
        valid = in_context_start & in_context_end & (length >= 1)
        valid &= length <= self.max_answer_length
        scores = start_lp[:, :, None] + end_lp  # [B, K, K]
        scores = tf.where(valid, scores, -1e9)
        flat = tf.reshape(scores, [-1, k * k])  # [B, K*K]
        best = tf.argmax(flat, axis=-1, output_type=tf.int32)
        has_answer = tf.reduce_max(flat, axis=-1) > -1e8
        start = tf.where(
            has_answer, tf.gather(tf.reshape(starts, [-1, k * k]), best, batch_dims=1), 0
        )
        end = tf.where(
            has_answer, tf.gather(tf.reshape(end_idx, [-1, k * k]), best, batch_dims=1), 0
        )
        tokens = tf.gather(self.vocab_tokens, features["input_ids"])  # [B, L]
        positions = tf.range(tf.shape(tokens)[1])[None, :]  # [1, L]
        in_span = (positions >= start[:, None]) & (positions <= end[:, None]) & has_answer[:, None]
        joined = tf.strings.reduce_join(
            tf.ragged.boolean_mask(tokens, in_span), axis=-1, separator=" "
        )  # [B]
        return {
            "start_index": start,
            "end_index": end,
            "answer_text": tf.strings.regex_replace(joined, " ##", ""),
            "span_log_prob": tf.where(has_answer, tf.reduce_max(flat, axis=-1), 0.0),
            "answerable_logit": tf.cast(raw["answerable_logit"], tf.float32),
        }
