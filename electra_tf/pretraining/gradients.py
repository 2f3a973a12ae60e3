"""The gradient of one pre-training step, three ways: whole batch, accumulated, parallel.

`ElectraPretrainer.train_update` picks one from the config and applies the result once:

- `loss_gradients`: one forward and backward pass over the batch (and the step's metrics are
  the caller's to update);
- `accumulated_gradients` (`gradient_accumulation_steps` k > 1): k micro-batches one after
  another in a `tf.while_loop`, so only one micro-batch's activations are alive at a time;
- `parallel_gradients` (`parallel_micro_batches` k > 1): k micro-batches as independent ops of
  one graph, which an executor with k inter-op threads runs side by side.

In both split forms each micro-batch's losses divide by the WHOLE batch's denominators
(`whole_batch_denominators`: the masked-slot count is known before masking), so the summed
gradient is the one-pass gradient of the same corrupted batch.

Every function takes the pretrainer `model` explicitly and uses its `forward`, `draw`,
`update_metrics`, `config`, `special_ids`, `two_tower` and `optimizer`.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from electra_tf.modeling.dropout import seeds_from
from electra_tf.pretraining.losses import replica_sum
from electra_tf.pretraining.masking import candidates_mask, num_masked_slots
from electra_tf.pretraining.replica_draws import replica_rows

# The model is an `ElectraPretrainer` (its `forward`, `draw`, `config`); typed as a Keras model
# so that this module, which the pretrainer imports, does not import it back.
ElectraPretrainer = keras.Model


def loss_gradients(
    model: ElectraPretrainer,
    inputs: dict[str, tf.Tensor],
    variables: list[tf.Variable],
    denominators: tuple[tf.Tensor, ...] | None = None,
    draws: dict | None = None,
    dropout_seed: tf.Tensor | None = None,
) -> tuple[list, dict[str, tf.Tensor]]:
    """The gradient of `model`'s training loss on `inputs`, and the forward's outputs.

    Under a `LossScaleOptimizer` the loss is scaled before the backward pass (float16
    gradients would underflow otherwise) and the gradients unscaled after. Every dropout mask
    of the pass comes from `dropout_seed` (`dropout.seeds_from`), itself from `model.rng`: a
    run resumed from a checkpoint draws the masks the uninterrupted run would have.

    Args:
        model: the pretrainer; its `optimizer` decides the loss scaling.
        inputs: dict of int `input_ids`, `input_mask`, `segment_ids`, each [batch, seq_len].
        variables: the variables to differentiate with respect to.
        denominators: the losses' whole-batch denominators (`whole_batch_denominators`), or
            None for `inputs`' own.
        draws: the masking and sampling draws (`model.draw`'s, or a slice of them), or None
            to draw anew.
        dropout_seed: int [2], the pass's dropout seed; None: `part_dropout_seed(draws, 0, 1)`.

    Returns:
        (one gradient per variable, None where the loss does not depend on it; `model.forward`'s
        outputs).
    """
    optimizer = model.optimizer
    scaling = isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
    if draws is None:
        draws = model.draw(inputs)
    if dropout_seed is None:
        dropout_seed = part_dropout_seed(draws, 0, 1)
    with tf.GradientTape() as tape, seeds_from(dropout_seed):
        outputs = model.forward(inputs, True, denominators=denominators, draws=draws)
        loss = outputs["loss"]
        if scaling:
            loss = optimizer.get_scaled_loss(loss)
    gradients = tape.gradient(loss, variables)
    if scaling:
        gradients = optimizer.get_unscaled_gradients(gradients)
    return gradients, outputs


def part_dropout_seed(draws: dict, index: int | tf.Tensor, parts: int) -> tf.Tensor:
    """int32 [2]: the dropout seed of micro-batch `index` of `parts` (0 of 1: the whole
    batch), on this replica, from the step's sampling seed (`draws["sample_seed"]`, one draw of
    `model.rng`): distinct for every part and replica, and continued by a resumed run."""
    replica, _ = replica_rows()
    data = tf.cast(replica, tf.int32) * parts + tf.cast(index, tf.int32) + 1
    return tf.random.experimental.stateless_fold_in(draws["sample_seed"], data)


def whole_batch_denominators(
    model: ElectraPretrainer, inputs: dict[str, tf.Tensor], parts: int
) -> tuple[tf.Tensor, ...]:
    """The losses' denominators over the whole batch (and all replicas), for `parts`
    micro-batches that each see a share of it; checks that `parts` divides the batch.

    Args:
        model: the pretrainer (its `config`, `special_ids` and `two_tower`).
        inputs: dict of int `input_ids`, `input_mask`, `segment_ids`, each [batch, seq_len].
        parts: the number of micro-batches.

    Returns:
        float32 scalars: (masked-slot count, real-token count), and with the two-tower
        generator the masking-candidate count (the cloze loss's), as `electra_loss` takes them.
    """
    config = model.config
    batch = tf.shape(inputs["input_ids"])[0]
    tf.debugging.assert_equal(
        batch % parts,
        0,
        message=f"{parts} micro-batches must divide the per-replica batch",
    )
    denominators = (
        replica_sum(
            num_masked_slots(
                inputs["input_ids"],
                inputs["input_mask"],
                config.max_predictions_per_seq,
                config.mask_prob,
                with_replacement=config.mask_positions_with_replacement,
                **model.special_ids,
            )
        ),
        replica_sum(tf.reduce_sum(tf.cast(inputs["input_mask"], tf.float32))),
    )
    if model.two_tower:
        # The cloze loss's denominator: the whole batch's masking candidates.
        candidates = candidates_mask(inputs["input_ids"], inputs["input_mask"], **model.special_ids)
        denominators += (replica_sum(tf.reduce_sum(tf.cast(candidates, tf.float32))),)
    return denominators


def parallel_gradients(
    model: ElectraPretrainer,
    inputs: dict[str, tf.Tensor],
    variables: list[tf.Variable],
    parts: int,
) -> list:
    """The batch's gradient as the sum of `parts` micro-batches' that are independent ops (no
    loop), updating `model`'s metrics with each.

    Args:
        model: the pretrainer.
        inputs: dict of int `input_ids`, `input_mask`, `segment_ids`, each [batch, seq_len];
            `parts` must divide batch.
        variables: the variables to differentiate with respect to.
        parts: the number of micro-batches.

    Returns:
        One dense gradient per variable (None where no part's loss depends on it).
    """
    denominators = whole_batch_denominators(model, inputs, parts)
    # The masking and the sampler's noise (where its rows start in the seed's stream) are
    # drawn once for the whole batch and sliced: the corrupted batch, and so the update, are
    # the one-pass step's from the same state of `model.rng` (dropout aside: each part's
    # masks come from its own seed, below).
    draws = model.draw(inputs)
    size = tf.shape(inputs["input_ids"])[0] // parts

    # One part's forward and backward, traced once and called once per part: the parts
    # have the same shapes, and tracing each anew (the graph builds the backward op by op, in
    # Python) cost about a third of the whole step's first trace. Its dropout seeds come in
    # as an argument (`part_dropout_seed`), so the body draws nothing of its own; not inlined,
    # so the graph optimiser too works on one copy.
    @tf.function(autograph=False, experimental_attributes={"_noinline": True})
    def part_gradients(part, part_draws, dropout_seed):
        return loss_gradients(model, part, variables, denominators, part_draws, dropout_seed)

    sums = None
    for index in range(parts):
        rows = slice(index * size, (index + 1) * size)
        part = {key: value[rows] for key, value in inputs.items()}
        dropout_seed = part_dropout_seed(draws, index, parts)
        gradients, outputs = part_gradients(part, _slice_draws(draws, rows), dropout_seed)
        # Each part's loss is its share of the batch loss: scale so the Mean is the total.
        model.update_metrics(outputs, part, parts=parts)
        sums = add_gradients(sums, gradients)
    return sums


def add_gradients(sums: list | None, gradients: list) -> list:
    """`sums` plus one micro-batch's `gradients`, per variable (`sums` None: the first), each
    densified (an embedding's IndexedSlices), as the optimizer does before clipping; None (a
    variable the loss does not reach) adds nothing. Pre-training's and fine-tuning's parallel
    micro-batches both sum with it."""
    gradients = [None if g is None else tf.convert_to_tensor(g) for g in gradients]
    if sums is None:
        return gradients
    return [
        grad if total is None else total if grad is None else total + grad
        for total, grad in zip(sums, gradients, strict=True)
    ]


# The draws that are per example (sliced with the batch's rows); `masked` is a dict of them.
_PER_ROW_DRAWS = ("uniform", "sample_starts")


def _slice_draws(draws: dict, rows: slice) -> dict:
    """`rows` of the batch's draws: the masking, the sampler's row starts (and fed uniforms)
    are per example; the sampler's seed is the batch's."""
    part_draws = {
        "masked": {key: value[rows] for key, value in draws["masked"].items()},
        "sample_seed": draws["sample_seed"],
    }
    part_draws.update({key: draws[key][rows] for key in _PER_ROW_DRAWS if key in draws})
    return part_draws


def accumulated_gradients(
    model: ElectraPretrainer,
    inputs: dict[str, tf.Tensor],
    variables: list[tf.Variable],
    steps: int,
) -> list:
    """The batch's gradient as the sum of `steps` micro-batches' run one after another (a
    `tf.while_loop`), updating `model`'s metrics with each.

    The masking and the sampler's noise (its row starts) are drawn once for the whole batch
    and sliced, as in `parallel_gradients`: the corrupted batch, and so the update, are the
    one-pass step's (dropout aside), and no collective op (the draws' all-gather under
    several replicas) runs inside the loop, where tf.distribute cannot synchronise.

    Args:
        model: the pretrainer.
        inputs: dict of int `input_ids`, `input_mask`, `segment_ids`, each [batch, seq_len];
            `steps` must divide batch.
        variables: the variables to differentiate with respect to.
        steps: the number of micro-batches.

    Returns:
        One dense gradient per variable (zeros where the loss does not depend on it).
    """
    batch = tf.shape(inputs["input_ids"])[0]
    denominators = whole_batch_denominators(model, inputs, steps)
    # [steps, batch / steps, ...] per feature.
    micro = {
        key: tf.reshape(value, tf.concat([[steps, batch // steps], tf.shape(value)[1:]], 0))
        for key, value in inputs.items()
    }

    draws = model.draw(inputs)
    # [steps, batch / steps, ...] per draw; the sampler's seed is the batch's.
    micro_draws = {
        "masked": {key: _micro(value, steps) for key, value in draws["masked"].items()},
        "rows": {key: _micro(draws[key], steps) for key in _PER_ROW_DRAWS if key in draws},
    }

    def body(index, sums):
        part = {key: value[index] for key, value in micro.items()}
        part_draws = {
            "masked": {key: value[index] for key, value in micro_draws["masked"].items()},
            "sample_seed": draws["sample_seed"],
            **{key: value[index] for key, value in micro_draws["rows"].items()},
        }
        seed = part_dropout_seed(draws, index, steps)
        gradients, outputs = loss_gradients(model, part, variables, denominators, part_draws, seed)
        # Each part's loss is its share of the batch loss: scale so the Mean is the total.
        model.update_metrics(outputs, part, parts=steps)
        sums = [
            total if grad is None else total + tf.convert_to_tensor(grad)
            for total, grad in zip(sums, gradients, strict=True)
        ]
        return index + 1, sums

    zeros = [tf.zeros_like(variable) for variable in variables]
    _, sums = tf.while_loop(lambda index, _: index < steps, body, (tf.constant(0), zeros))
    return sums


def _micro(value: tf.Tensor, steps: int) -> tf.Tensor:
    """[batch, ...] -> [steps, batch / steps, ...]."""
    shape = tf.shape(value)
    return tf.reshape(value, tf.concat([[steps, shape[0] // steps], shape[1:]], 0))
