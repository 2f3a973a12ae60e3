"""ElectraPretrainer: generator + discriminator trained jointly (the original's
`run_pretraining.PretrainingModel`, ELECTRA and Electric) as one tf_keras Model with a custom
train step."""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from electra_tf.checkpoints import names as checkpoint_names
from electra_tf.config import ResolvedPretrainingConfig, check_resolved, config_from_values
from electra_tf.modeling.utils import no_autograph
from electra_tf.optimization import learning_rate_schedule
from electra_tf.pretraining import ablations
from electra_tf.pretraining.electric import electric_logits
from electra_tf.pretraining.gradients import (
    accumulated_gradients,
    loss_gradients,
    parallel_gradients,
)
from electra_tf.pretraining.losses import electra_loss
from electra_tf.pretraining.masking import (
    CLS_ID,
    MASK_ID,
    SEP_ID,
    candidates_mask,
    mask_inputs,
)
from electra_tf.pretraining.networks import PretrainingNetworks, build_networks
from electra_tf.pretraining.replica_draws import (
    global_rows_masking,
    sample_row_starts,
    step_seeds,
)
from electra_tf.pretraining.sampling import gather_positions, gumbel_sample, scatter_update


class ElectraPretrainer(keras.Model):
    """ELECTRA pre-training: mask -> generator (MLM) -> sample -> discriminator (RTD).

    The networks (`PretrainingNetworks`: discriminator, generator, heads) are built by
    `build_networks(config, ...)`, as the original for each setting of the config (see
    `networks.py`); the pretrainer runs them. With the two-tower generator (forced by
    `electric_objective`) the generator is a cloze model run on the UNMASKED input, trained by
    the cloze loss over every masking candidate, and the samples come from its logits at the
    masked slots. With `electric_objective` (Electric) the discriminator's output is an energy;
    its logit is energy + stop_gradient(log q(token)) + log(mask_prob / (1 - mask_prob)), q
    the cloze model, and every scattered-into position is labelled fake (see `electric.py`).

    Randomness of the objective (positions, the 85/15 draw, Gumbel noise) comes from
    `self.rng`, a `tf.random.Generator` seeded with `config.seed`: it is checkpointed with the
    model, so a resumed run continues the same stream. Under several replicas each replica
    gets its rows of the draws one replica would make for the global batch
    (`replica_draws.py`), so the layout of a batch over devices and workers does not change
    the corruption. Dropout uses Keras's own RNG.

    The paper's objective ablations (`objective_variant`, see `ablations.py`): "electra_15"
    weights the replaced-token loss and metrics by the generator's positions; "replace_mlm" /
    "all_tokens_mlm" put masked-LM heads on the corrupted input where the replaced-token head
    was (`mlm_predictions`, and the copy gate `copy_predictions`); their outputs have no
    `disc_logits` / `disc_labels` / `disc_losses` but `corrupted_mlm_logits`, (all tokens)
    `copy_logits`, and the `corrupted_mlm_*` of `ablations.corrupted_mlm_loss`.

    Training (`train_update`, Keras's `train_step`) takes the gradient one of three ways
    (`gradients.py`: whole batch, accumulated, parallel micro-batches) and applies it once.

    Args:
        config: resolved pre-training config (`pretraining_config(...)`, or
            a `PretrainingConfig` after `.resolve`; an unresolved one is a TypeError saying so);
            its `precision` is the dtype policy of every layer.
        networks: the networks to train, `build_networks(config, ...)`'s; None builds them
            with this model's dtype policy.
        cls_id, sep_id, mask_id: the vocabulary's [CLS], [SEP] and [MASK] ids.

    Call args:
        inputs: dict of int `input_ids`, `input_mask`, `segment_ids`, each [batch, seq_len].
        training: enables dropout.

    Returns:
        dict: scalar `loss`, `masked_lm_loss`, `disc_loss`; `masked_input_ids`,
        `masked_lm_positions`, `masked_lm_ids`, `masked_lm_weights`, `mlm_logits`
        [batch, N, vocab], `masked_lm_losses` [batch, N]; and with the ELECTRA objective
        `sampled_ids` [batch, N], `fake_input_ids`, `disc_labels`, `disc_logits`, `disc_losses`
        [batch, seq_len]. With the two-tower generator also `cloze_logits` [batch, seq_len,
        vocab], `cloze_weights`, `cloze_losses` [batch, seq_len] and scalar `cloze_loss`; with
        Electric also `energies` (the discriminator head's output, before the log q and prior
        terms) and `log_q` (the cloze log-probability of each discriminator input token),
        both [batch, seq_len].
    """

    def __init__(
        self,
        config: ResolvedPretrainingConfig,
        networks: PretrainingNetworks | None = None,
        cls_id: int = CLS_ID,
        sep_id: int = SEP_ID,
        mask_id: int = MASK_ID,
        **kwargs,
    ):
        if networks is not None and not isinstance(networks, PretrainingNetworks):
            # The special ids came second before `networks` did: a positional caller gets
            # this error, not networks made of ints.
            raise TypeError(f"networks: a PretrainingNetworks, not {type(networks).__name__}")
        config = check_resolved(config, "ElectraPretrainer")
        kwargs.setdefault("name", "electra_pretrainer")
        kwargs.setdefault("dtype", config.precision)
        super().__init__(**kwargs)
        self.config = config
        self.special_ids = {"cls_id": cls_id, "sep_id": sep_id, "mask_id": mask_id}
        _check_special_ids(self.special_ids, config.vocab_size)
        if networks is None:
            networks = build_networks(config, self.dtype_policy)
        networks.check_matches(config)
        self.two_tower = networks.two_tower
        self.separate_generator = networks.separate_generator
        # Keras tracks layers in the order they are assigned: this order fixes the order of
        # `trainable_variables` (and of the optimizer's slots), the attribute names the
        # checkpoint's object paths.
        self.discriminator = networks.discriminator
        self.generator = networks.generator
        self.cloze_head = networks.cloze_head
        self.generator_head = networks.generator_head
        self.corrupted_mlm_head = networks.corrupted_mlm_head
        self.discriminator_head = networks.discriminator_head
        self.rng = tf.random.Generator.from_seed(config.seed)
        self._trackers = ablations.pretraining_metrics(config)

    def build_variables(self) -> ElectraPretrainer:
        """Every variable already exists after construction; kept for callers that ask."""
        return self

    # ------------------------------------------------------------------ forward pass
    def call(self, inputs, training=False):
        return self.forward(inputs, training)

    def draw(self, inputs: dict[str, tf.Tensor]) -> dict:
        """The step's random draws for `inputs`' batch, from `self.rng`.

        Args:
            inputs: dict of int `input_ids`, `input_mask`, each [batch, seq_len].

        Returns:
            dict: `masked` (`mask_inputs`' outputs), `sample_seed` [2] and, with a
            discriminator, `sample_starts` int64 [batch]: where each row's Gumbel uniforms
            start in that seed's stream (`gumbel_sample`'s `start`). Sliced by rows with the
            masking, the draws of a part of the batch are the whole batch's for those rows.
        """
        config = self.config
        # [2, 2]: one stateless seed per random step, the same on every replica.
        seeds = step_seeds(self.rng, 2)

        def mask(input_ids: tf.Tensor, input_mask: tf.Tensor) -> dict:
            return mask_inputs(
                input_ids,
                input_mask,
                config.max_predictions_per_seq,
                config.mask_prob,
                seeds[:, 0],
                with_replacement=config.mask_positions_with_replacement,
                **self.special_ids,
            )

        # Under several replicas: this replica's rows of the global batch's masking.
        masked = global_rows_masking(mask, inputs["input_ids"], inputs["input_mask"])
        draws = {"masked": masked, "sample_seed": seeds[:, 1]}
        if config.has_discriminator:
            # This replica's rows of the global batch's noise (all of it on one replica).
            draws["sample_starts"] = sample_row_starts(
                tf.shape(inputs["input_ids"])[0],
                config.max_predictions_per_seq * config.vocab_size,
            )
        return draws

    def forward(self, inputs, training, denominators=None, draws=None) -> dict:
        """The forward pass and the losses (`call`'s outputs, see the class docstring).

        Args:
            inputs: dict of int `input_ids`, `input_mask`, `segment_ids`, each [batch, seq_len].
            training: enables dropout.
            denominators: the losses' denominators, as `electra_loss`'s (a micro-batch's
                share of a larger batch: `gradients.whole_batch_denominators`); None: this
                batch's own.
            draws: `draw`'s (or a slice of a larger batch's) instead of drawing anew.
        """
        input_ids = tf.cast(inputs["input_ids"], tf.int32)
        input_mask = tf.cast(inputs["input_mask"], tf.int32)
        segment_ids = tf.cast(inputs["segment_ids"], tf.int32)
        if draws is None:
            draws = self.draw(inputs)
        masked = draws["masked"]
        outputs = dict(masked)
        if self.two_tower:
            outputs.update(self._cloze_outputs(input_ids, input_mask, segment_ids, training))
            # [batch, N, vocab]: the cloze distributions at the masked slots are what the
            # generator samples from (the original's mlm_output for the two-tower generator).
            mlm_logits = gather_positions(outputs["cloze_logits"], masked["masked_lm_positions"])
        else:
            mlm_logits = self._generator_logits(masked, input_mask, segment_ids, training)
        outputs["mlm_logits"] = mlm_logits
        if self.config.has_discriminator:
            outputs.update(
                self._discriminate(
                    mlm_logits,
                    masked,
                    input_ids,
                    input_mask,
                    segment_ids,
                    draws["sample_seed"],
                    training,
                    cloze_logits=outputs.get("cloze_logits"),
                    uniform=draws.get("uniform"),
                    starts=draws.get("sample_starts"),
                )
            )
        outputs.update(self._loss_outputs(outputs, input_ids, input_mask, denominators))
        return outputs

    def _loss_outputs(self, outputs, input_ids, input_mask, denominators) -> dict:
        """`electra_loss`'s outputs (and a masked-LM ablation's) for the forward's `outputs`
        so far: masking, `mlm_logits` [batch, N, vocab], with a discriminator its outputs,
        with the two-tower generator `cloze_logits` [batch, seq_len, vocab], `cloze_weights`.
        `input_ids`, `input_mask` [batch, seq_len]; `denominators` as `forward`'s."""
        config = self.config
        cloze = None
        if self.two_tower:
            cloze = (outputs["cloze_logits"], input_ids, outputs["cloze_weights"])
        disc_weights, disc_denominators = ablations.discriminator_weighting(
            config, outputs["masked_lm_positions"], input_mask, denominators
        )
        losses = electra_loss(
            outputs["mlm_logits"],
            outputs["masked_lm_ids"],
            outputs["masked_lm_weights"],
            outputs.get("disc_logits"),
            outputs.get("disc_labels"),
            disc_weights,
            gen_weight=config.gen_weight,
            disc_weight=config.disc_weight,
            denominators=disc_denominators,
            cloze=cloze,
        )
        if self.corrupted_mlm_head is not None:
            losses.update(
                ablations.corrupted_mlm_loss(
                    config, {**outputs, **losses}, input_ids, input_mask, denominators
                )
            )
        return losses

    def _cloze_outputs(self, input_ids, input_mask, segment_ids, training):
        """The two-tower generator on the UNMASKED input (`_get_cloze_outputs`): float32
        `cloze_logits` [batch, seq_len, vocab] at every position, and `cloze_weights`
        [batch, seq_len], the positions its loss covers (the masking candidates)."""
        inputs = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
        features = self.generator(inputs, training=training)  # [batch, seq_len, 2 * hidden]
        # [batch, seq_len, vocab]
        logits = tf.cast(self.cloze_head(features, training=training), tf.float32)
        weights = candidates_mask(input_ids, input_mask, **self.special_ids)  # [batch, seq_len]
        return {"cloze_logits": logits, "cloze_weights": tf.cast(weights, tf.float32)}

    def _generator_logits(self, masked, input_mask, segment_ids, training):
        """float32 [batch, N, vocab]: the generator's MLM logits at the masked positions."""
        config = self.config
        if self.generator is None:
            batch = tf.shape(input_mask)[0]
            # [batch, N, vocab] of zeros: a uniform generator.
            mlm_logits = tf.zeros([batch, config.max_predictions_per_seq, config.vocab_size])
        else:
            generator_inputs = {
                "input_ids": masked["masked_input_ids"],
                "input_mask": input_mask,
                "segment_ids": segment_ids,
            }
            hidden = self.generator(generator_inputs, training=training)["sequence_output"]
            mlm_logits = self.generator_head(
                hidden, masked["masked_lm_positions"], training=training
            )
        return tf.cast(mlm_logits, tf.float32)

    def _discriminate(
        self,
        mlm_logits,
        masked,
        input_ids,
        input_mask,
        segment_ids,
        seed,
        training,
        cloze_logits=None,
        uniform=None,
        starts=None,
    ):
        """Samples replacements from the generator and runs the discriminator on the result:
        `sampled_ids`, `fake_input_ids`, `disc_labels` (1 = replaced), `disc_logits`; with
        Electric also `energies` and `log_q` (see `electric.electric_logits`). `uniform`,
        `starts`: the draws' `uniform` (fed from outside) and `sample_starts` (None: from 0)."""
        config = self.config
        positions = masked["masked_lm_positions"]
        # Sampling is outside the gradient path: the generator learns by MLM only.
        sampled = gumbel_sample(
            mlm_logits,
            seed,
            temperature=config.temperature,
            disallow_ids=masked["masked_lm_ids"] if config.disallow_correct else None,
            uniform=uniform,
            start=0 if starts is None else starts[0],
        )
        # All slots get a sample, the 15% left visible too; duplicate positions get the
        # floor-average of their samples, as the original.
        fake_ids, updated = scatter_update(input_ids, sampled, positions)
        if config.electric_objective:
            # Every position a sample was written to is a noise sample, also where it happens
            # to equal the original token: in NCE the label says which distribution a token
            # came from, not whether it differs.
            disc_labels = updated
        else:
            disc_labels = updated * tf.cast(tf.not_equal(fake_ids, input_ids), tf.int32)
        disc_inputs = {
            "input_ids": fake_ids,
            "input_mask": input_mask,
            "segment_ids": segment_ids,
        }
        hidden = self.discriminator(disc_inputs, training=training)["sequence_output"]
        if self.corrupted_mlm_head is not None:
            # Replace MLM / All-Tokens MLM: the network is a masked LM on the corrupted input.
            heads = self.corrupted_mlm_head(hidden, positions, training=training)
            return {"sampled_ids": sampled, "fake_input_ids": fake_ids, **heads}
        disc_logits = tf.cast(self.discriminator_head(hidden, training=training), tf.float32)
        outputs = {
            "sampled_ids": sampled,
            "fake_input_ids": fake_ids,
            "disc_labels": disc_labels,
            "disc_logits": disc_logits,
        }
        if config.electric_objective:
            outputs.update(electric_logits(disc_logits, cloze_logits, fake_ids, config.mask_prob))
        return outputs

    # ------------------------------------------------------------------ training
    @property
    def metrics(self):
        schedule = learning_rate_schedule(getattr(self, "optimizer", None))
        return self._trackers.metrics(with_learning_rate=schedule is not None)

    @no_autograph
    def train_step(self, data):
        """Keras's hook (`fit`): `train_update`, then the metric values."""
        self.train_update(data)
        return {metric.name: metric.result() for metric in self.metrics}

    @no_autograph
    def train_update(self, data):
        """One optimizer step on `data`'s batch and the metric updates, without reading the
        metrics: under tf.distribute every read is a cross-replica reduction, so the training
        loop calls this and reads the metrics once per logging period.

        The gradient comes from `gradients.py`: with `parallel_micro_batches` k > 1 the sum
        of k micro-batches' run side by side, with `gradient_accumulation_steps` k > 1 the
        sum of k micro-batches' run one after another, else the whole batch's in one pass;
        the optimizer applies it once. The split forms give the one-pass gradient of the
        same corrupted batch (each micro-batch divides by the whole batch's denominators).

        Args:
            data: the inputs dict (`call`'s), or a tuple whose first item it is.
        """
        inputs = data[0] if isinstance(data, tuple) else data
        optimizer = self.optimizer
        schedule = learning_rate_schedule(optimizer)
        if schedule is not None:
            # The rate this step uses (before apply_gradients advances `iterations`).
            self._trackers.update_learning_rate(schedule(optimizer.iterations))
        variables = self.trainable_variables
        steps = self.config.gradient_accumulation_steps
        parts = self.config.parallel_micro_batches
        if parts > 1:
            gradients = parallel_gradients(self, inputs, variables, parts)
        elif steps == 1:
            gradients, outputs = loss_gradients(self, inputs, variables)
            self.update_metrics(outputs, inputs)
        else:
            gradients = accumulated_gradients(self, inputs, variables, steps)
        optimizer.apply_gradients(zip(gradients, variables, strict=True))

    @no_autograph
    def test_step(self, data):
        inputs = data[0] if isinstance(data, tuple) else data
        self.update_metrics(self(inputs, training=False), inputs)
        # Evaluation does not step the schedule: no learning rate.
        return {m.name: m.result() for m in self.metrics if m.name != "learning_rate"}

    def update_metrics(self, outputs, inputs, parts: int = 1) -> None:
        """Adds one forward pass's `outputs` to the metrics.

        Args:
            outputs: `forward`'s outputs.
            inputs: the inputs it ran on (their `input_mask` [batch, seq_len]).
            parts: how many such passes make up the step's batch: each scalar loss is
                weighted so that the Mean over a step is the batch's loss.
        """
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        self._trackers.update(outputs, inputs["input_mask"], replicas * parts)

    # ------------------------------------------------------------------ names
    def variable_map(self) -> dict[str, tf.Variable]:
        """Every trainable variable once, under its original TF1 checkpoint name."""
        names = self.discriminator.variable_map(checkpoint_names.DISCRIMINATOR)
        if self.separate_generator:
            names.update(
                self.generator.variable_map(
                    checkpoint_names.GENERATOR,
                    include_embeddings=self.config.untied_generator_embeddings,
                )
            )
        if self.two_tower:
            names.update(self.generator.variable_map())  # generator_ltr/..., generator_rtl/...
            names.update(self.cloze_head.variable_map(checkpoint_names.CLOZE_HEAD))
        if self.generator_head is not None:
            names.update(self.generator_head.variable_map(checkpoint_names.GENERATOR_HEAD))
        if self.discriminator_head is not None:
            names.update(self.discriminator_head.variable_map())
        if self.corrupted_mlm_head is not None:
            names.update(self.corrupted_mlm_head.variable_map())
        return names

    def get_config(self):
        return {"config": self.config.to_dict(), **self.special_ids, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(config_from_values(config.pop("config"), "ElectraPretrainer config"), **config)


def _check_special_ids(special_ids: dict[str, int], vocab_size: int) -> None:
    """Raises ValueError for an id outside the vocabulary (the defaults are BERT's)."""
    for key, value in special_ids.items():
        if not 0 <= value < vocab_size:
            raise ValueError(
                f"{key} {value} is outside the vocabulary (vocab_size "
                f"{vocab_size}): pass the vocabulary's special ids"
            )
