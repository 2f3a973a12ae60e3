"""One post-LayerNorm BERT transformer block (the original's `encoder/layer_i`)."""

from __future__ import annotations

import math

import tensorflow as tf
import tf_keras as keras

from electra_tf.checkpoints import names
from electra_tf.config import ModelConfig
from electra_tf.modeling.attention_softmax import softmax_dropout_train, softmax_probs
from electra_tf.modeling.dense_forms import bias_add_train, dense_rows, is_linear
from electra_tf.modeling.dropout import Dropout
from electra_tf.modeling.graph_values import graph_constant, per_graph, true_value
from electra_tf.modeling.residual_norm import residual_norm_train
from electra_tf.modeling.utils import (
    PLAIN_INFERENCE,
    ConfiguredLayer,
    InferenceOptions,
    apply_layer_norm,
    build_sublayer,
    dense_map,
    layer_norm,
    layer_norm_map,
    require_built,
    truncated_normal,
)


def _joins_kernels(training, options: InferenceOptions) -> bool:
    """Whether a layer's query, key and value are one product of constant kernels at
    inference (`_joined_heads`)."""
    return options.constant_kernels and not training and not tf.executing_eagerly()


class TransformerLayer(ConfiguredLayer):
    """Self-attention + feed-forward block, post-LN, exactly as BERT/ELECTRA's `transformer_model`.

    x -> attention(x) -> dropout -> LayerNorm(x + .) -> dense(F, erf-gelu) -> dense(H) -> dropout
    -> LayerNorm(. + residual). Q/K/V kernels are stored [H, H] (the TF1 layout); heads are split
    by a reshape and a transpose, and both attention products are batched matmuls.

    The block works on [batch * seq_len, hidden] rows, as the original's `transformer_model`
    does: every dense layer is then one MatMul + BiasAdd (+ GELU), which Grappler fuses into one
    kernel (except in a bfloat16 training step, where `dense_rows` keeps them apart); a dense
    layer on 3-D input goes through tensordot, whose reshape between the MatMul and the BiasAdd
    blocks that fusion. The scores are scaled after the product, as in the
    original, so that the scale and the mask become the product's fused post-ops
    (`_MklFusedBatchMatMulV2` under oneDNN).

    Args:
        config: the encoder config (hidden size, heads, FFN size, dropout, init range).

    Call args:
        hidden: float [batch, seq_len, hidden].
        attention_bias: float [batch, 1, 1, seq_len], 0 for real keys and -10000 for padding
            (or [batch, 1, seq_len, seq_len] for causal attention, per query).
        training: enables dropout.
        inference_options: at inference, the LayerNorms' form (`InferenceOptions`; the query
            groups are the encoder's, `call_blocks`).

    Returns:
        float [batch, seq_len, hidden].
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        if config.hidden_size % config.num_attention_heads:
            raise ValueError(
                f"hidden_size {config.hidden_size} is not a multiple of "
                f"num_attention_heads {config.num_attention_heads}"
            )
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        hidden = config.hidden_size

        def dense(units, name):
            return keras.layers.Dense(
                units,
                kernel_initializer=truncated_normal(config),
                name=name,
                dtype=self.dtype_policy,
            )

        self.query = dense(hidden, "query")
        self.key = dense(hidden, "key")
        self.value = dense(hidden, "value")
        self.attention_output = dense(hidden, "attention_output")
        self.attention_layer_norm = layer_norm("attention_layer_norm", self.dtype_policy)
        # hidden_act ("gelu", the exact erf form, for every ELECTRA model) is applied in call:
        # `dense_rows` gives training its own form of GELU (and, in bfloat16, of the bias).
        self.intermediate = dense(config.intermediate_size, "intermediate")
        self.output_dense = dense(hidden, "output_dense")
        self.output_layer_norm = layer_norm("output_layer_norm", self.dtype_policy)
        self.attention_dropout = Dropout(
            config.attention_probs_dropout_prob, dtype=self.dtype_policy
        )
        self.hidden_dropout = Dropout(config.hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        if self.built:
            return
        hidden, ffn = self.config.hidden_size, self.config.intermediate_size
        # Every sublayer runs on [batch * seq_len, width] rows (see the class docstring).
        for layer in (self.query, self.key, self.value, self.attention_output):
            build_sublayer(layer, [None, hidden])
        build_sublayer(self.attention_layer_norm, [None, hidden])
        build_sublayer(self.intermediate, [None, hidden])
        build_sublayer(self.output_dense, [None, ffn])
        build_sublayer(self.output_layer_norm, [None, hidden])
        super().build(input_shape)

    def _split_heads(self, rows, batch, seq_len):
        """[batch * seq_len, hidden] -> [batch, heads, seq_len, head_size]."""
        # [batch, seq_len, heads, head_size]
        x = tf.reshape(rows, [batch, seq_len, self.num_heads, self.head_size])
        return tf.transpose(x, [0, 2, 1, 3])

    def _probs(self, query, key, attention_bias, training=False):
        """Softmax of the scaled, masked scores of `query` against `key`, in their dtype, then
        (in training) the attention dropout."""
        scores = tf.matmul(query, key, transpose_b=True)  # [batch, heads, seq_q, seq_k]
        # The scale and the bias in this form (a scalar Mul, then an AddV2 of a
        # [batch, 1, ., seq_k] tensor) are what oneDNN fuses into the product.
        scores = scores * (1.0 / math.sqrt(self.head_size))
        scores = scores + tf.cast(attention_bias, scores.dtype)
        dropout = self.attention_dropout
        bfloat16_step = training is True and scores.dtype == tf.bfloat16
        if bfloat16_step and dropout.applies_in_kernel(scores):
            return softmax_dropout_train(scores, dropout.call_seed(), dropout.rate)
        return dropout(softmax_probs(scores), training=training)

    def _joins_in_training(self, training, rows) -> bool:
        """Whether a training step takes `_joined_heads_train`: in bfloat16 (where the products
        are kept apart from their biases anyway), with Keras's own linear Dense layers."""
        layers = (self.query, self.key, self.value)
        return training is True and rows.dtype == tf.bfloat16 and all(map(is_linear, layers))

    def _dense(self, layer, rows, training, options, activation=None):
        """`dense_rows` of one of this layer's dense sublayers, in `options`' kernel form."""
        return dense_rows(layer, rows, training, activation, options.constant_kernels)

    def _joined_heads(self, rows, batch, seq_len):
        """(query, key, value), each [batch, heads, seq_len, head_size], from one product of
        `rows` with the three kernels joined into one constant [hidden, 3 * hidden]: for
        constant kernels (`InferenceOptions`), where each product is a kernel call whose fixed
        cost is most of it at small batches. The same values as three `dense_rows`."""
        layers = (self.query, self.key, self.value)
        kernel = tf.cast(graph_constant(*(layer.kernel for layer in layers)), rows.dtype)
        bias = per_graph(
            ("joined bias", *(id(layer.bias) for layer in layers)),
            lambda: tf.concat([tf.cast(layer.bias, rows.dtype) for layer in layers], axis=0),
        )
        with tf.name_scope("query_key_value"):
            product = tf.nn.bias_add(tf.matmul(rows, kernel), bias)  # [n, 3 * hidden]
        return self._split_joined(product, batch, seq_len)

    def _joined_heads_train(self, rows, batch, seq_len):
        """`_joined_heads` in a bfloat16 training step: the three kernels joined [hidden,
        3 * hidden] from the variables, one bfloat16 product (its gradient one product for the
        rows, one for the joined kernel, where three of each were), the float32 biases added
        apart from it (`bias_add_train`, as `dense_rows` adds them in a bfloat16 step). The same
        values as three `dense_rows` (each output column is its kernel column's product)."""
        layers = (self.query, self.key, self.value)
        with tf.name_scope("query_key_value"):
            kernel = tf.concat([true_value(layer.kernel) for layer in layers], axis=1)
            bias = tf.concat([true_value(layer.bias) for layer in layers], axis=0)
            product = tf.matmul(rows, tf.cast(kernel, rows.dtype))  # [n, 3 * hidden]
            product = bias_add_train(product, bias)
        return self._split_joined(product, batch, seq_len)

    def _split_joined(self, product, batch, seq_len):
        """[batch * seq_len, 3 * hidden] (query | key | value) -> three [batch, heads,
        seq_len, head_size]."""
        # [batch, seq_len, 3, heads, head_size] -> [3, batch, heads, seq_len, head_size]
        parts = tf.reshape(product, [batch, seq_len, 3, self.num_heads, self.head_size])
        return tuple(tf.unstack(tf.transpose(parts, [2, 0, 3, 1, 4]), 3, axis=0))

    def _attention_probs(
        self, rows, batch, seq_len, attention_bias, training=False, options=PLAIN_INFERENCE
    ):
        query = self._split_heads(self._dense(self.query, rows, training, options), batch, seq_len)
        key = self._split_heads(self._dense(self.key, rows, training, options), batch, seq_len)
        return self._probs(query, key, attention_bias, training)

    def _output_rows(self, probs, value, rows, training, options):
        """Attention output, both LayerNorms and the feed-forward network, on the query rows;
        `options`: the inference forms (`InferenceOptions`: the LayerNorms', the kernels')."""
        context = tf.matmul(probs, value)  # [batch, heads, seq_q, head_size]
        context = tf.transpose(context, [0, 2, 1, 3])  # [batch, seq_q, heads, head_size]
        # [batch * seq_q, hidden]
        context = tf.reshape(context, [-1, self.config.hidden_size])
        attention = self._sublayer_end(
            self.attention_output, context, rows, self.attention_layer_norm, training, options
        )
        ffn = self._dense(self.intermediate, attention, training, options, self.config.hidden_act)
        return self._sublayer_end(
            self.output_dense, ffn, attention, self.output_layer_norm, training, options
        )

    def _sublayer_end(self, dense, x, residual, norm, training, options):
        """norm(residual + hidden_dropout(dense(x))) on [n, width] rows. A bfloat16 training
        step computes it as one cluster each way from the plain product (`residual_norm`)."""
        bfloat16_step = training is True and x.dtype == tf.bfloat16
        if bfloat16_step and norm.variable_dtype == "float32":
            dropout = self.hidden_dropout
            if is_linear(dense) and dropout.applies_in_kernel(x):
                with tf.name_scope(dense.name):
                    product = tf.matmul(x, tf.cast(dense.kernel, tf.bfloat16))  # [n, units]
                return residual_norm_train(
                    product, true_value(dense.bias), dropout.call_seed(), dropout.rate, residual,
                    true_value(norm.gamma), true_value(norm.beta), norm.epsilon,
                )  # fmt: skip
        output = self.hidden_dropout(self._dense(dense, x, training, options), training=training)
        # At inference an AddN, the same sum: Grappler's remapper fuses an Add into the product
        # before it (oneDNN's [BiasAdd, Add]) only where it can prove the two shapes equal,
        # which it cannot for the attention output's (its rows, counted at run time, come
        # through a reshape of the context); an AddN cannot broadcast, and it fuses that
        # without the proof (3-4% of a batch-32 serving call).
        inference = training is False or training is None
        summed = tf.math.add_n([output, residual]) if inference else output + residual
        return apply_layer_norm(norm, summed, training, fused=options.fused_layer_norms)

    def attention_probs(self, hidden, attention_bias):
        """Attention weights [batch, heads, seq_q, seq_k] (before dropout), in hidden's dtype."""
        batch, seq_len = tf.shape(hidden)[0], tf.shape(hidden)[1]
        rows = tf.reshape(hidden, [-1, self.config.hidden_size])  # [batch * seq_len, hidden]
        return self._attention_probs(rows, batch, seq_len, attention_bias)

    def call(
        self,
        hidden,
        attention_bias,
        training=False,
        inference_options: InferenceOptions = PLAIN_INFERENCE,
    ):
        batch, seq_len = tf.shape(hidden)[0], tf.shape(hidden)[1]
        rows = tf.reshape(hidden, [-1, self.config.hidden_size])  # [batch * seq_len, hidden]
        options = inference_options
        if _joins_kernels(training, options):
            query, key, value = self._joined_heads(rows, batch, seq_len)
            probs = self._probs(query, key, attention_bias)
        elif self._joins_in_training(training, rows):
            query, key, value = self._joined_heads_train(rows, batch, seq_len)
            probs = self._probs(query, key, attention_bias, training)
        else:
            value = self._split_heads(
                self._dense(self.value, rows, training, options), batch, seq_len
            )
            probs = self._attention_probs(rows, batch, seq_len, attention_bias, training, options)
        output = self._output_rows(probs, value, rows, training, options)
        return tf.reshape(output, [batch, seq_len, self.config.hidden_size])

    def call_blocks(
        self,
        rows: list[tf.Tensor],
        lengths: list[tf.Tensor],
        batch: tf.Tensor,
        attention_bias: tf.Tensor,
        inference_options: InferenceOptions = PLAIN_INFERENCE,
    ) -> list[tf.Tensor]:
        """Inference (no dropout) on consecutive groups of positions, as independent ops.

        `rows[i]` is group i's [batch * lengths[i], hidden] rows (the groups are consecutive
        pieces of the sequence, in order); returns each group's output rows. Each group's
        queries attend to every key, so the groups' keys and values are joined (the only ops
        that wait for all groups); everything else runs per group. The same function as `call`
        on the joined sequence. `attention_bias` is [batch, 1, 1, seq_len] (keys only);
        `inference_options` gives the LayerNorms' and the kernels' forms.
        """
        pieces = list(zip(rows, lengths, strict=True))
        options = inference_options

        def heads(layer, r, n):  # one group's rows through `layer`, split into heads
            return self._split_heads(self._dense(layer, r, False, options), batch, n)

        if _joins_kernels(False, options):
            groups = [self._joined_heads(r, batch, n) for r, n in pieces]
        else:
            groups = [tuple(heads(x, r, n) for x in (self.query, self.key, self.value))
                      for r, n in pieces]  # fmt: skip
        # [batch, heads, seq_len, head_size]: each group's heads split, then joined.
        key = tf.concat([k for _, k, _ in groups], axis=2)
        value = tf.concat([v for _, _, v in groups], axis=2)
        # The same values, shaped by the joined keys' length: Grappler's remapper fuses the mask
        # into the score product only where it can see that the two lengths are equal.
        attention_bias = tf.reshape(attention_bias, [batch, 1, 1, tf.shape(key)[2]])
        outputs = []
        for (r, _), (query, _, _) in zip(pieces, groups, strict=True):
            probs = self._probs(query, key, attention_bias)
            outputs.append(self._output_rows(probs, value, r, False, options))
        return outputs

    def variable_map(self, prefix: str) -> dict[str, tf.Variable]:
        """Original names under `prefix` (e.g. `electra/encoder/layer_3`) -> variables."""
        require_built(self)
        return {
            **dense_map(f"{prefix}/{names.QUERY}", self.query),
            **dense_map(f"{prefix}/{names.KEY}", self.key),
            **dense_map(f"{prefix}/{names.VALUE}", self.value),
            **dense_map(f"{prefix}/{names.ATTENTION_OUTPUT}", self.attention_output),
            **layer_norm_map(f"{prefix}/{names.ATTENTION_NORM}", self.attention_layer_norm),
            **dense_map(f"{prefix}/{names.INTERMEDIATE}", self.intermediate),
            **dense_map(f"{prefix}/{names.OUTPUT}", self.output_dense),
            **layer_norm_map(f"{prefix}/{names.OUTPUT_NORM}", self.output_layer_norm),
        }
