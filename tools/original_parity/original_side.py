"""The original's side of every parity tool: what TF 2.20 lacks of the libraries its TF1 code
imports (shims; nothing of its logic is changed), importing its files from an extracted copy,
and feeding it the project's masking and generator samples (`project_draws`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import types

from tools.original_parity.runtime import BATCH, SEQ, patched, session_config


def install_shims(tf, dense_mode="auto"):
    """Only what TF 2.20 lacks; returns a description of each shim."""
    import tensorflow.compat.v1 as v1

    notes = [_shim_layer_norm(v1)]
    estimator = _shim_estimator(v1)
    if estimator:
        notes.append(estimator)
    notes.append(_shim_layers(v1, dense_mode))
    return notes


def _shim_layer_norm(v1) -> str:
    """tensorflow.contrib.layers.layer_norm, as contrib's (norm over the last axis here,
    variables <scope>/LayerNorm/{beta,gamma}, variance epsilon 1e-12)."""

    def layer_norm(
        inputs,
        center=True,
        scale=True,
        activation_fn=None,
        reuse=None,
        variables_collections=None,
        outputs_collections=None,
        trainable=True,
        begin_norm_axis=1,
        begin_params_axis=-1,
        scope=None,
    ):
        with v1.variable_scope(scope, "LayerNorm", [inputs], reuse=reuse):
            inputs = v1.convert_to_tensor(inputs)
            shape = inputs.shape
            rank = shape.ndims
            if begin_norm_axis < 0:
                begin_norm_axis = rank + begin_norm_axis
            if begin_params_axis < 0:
                begin_params_axis = rank + begin_params_axis
            params_shape = shape[begin_params_axis:]
            # contrib's model_variable: these collections (+ TRAINABLE_VARIABLES, which
            # get_variable adds itself for a trainable variable).
            collections = [v1.GraphKeys.GLOBAL_VARIABLES, v1.GraphKeys.MODEL_VARIABLES]
            beta = gamma = None
            if center:
                beta = v1.get_variable(
                    "beta", shape=params_shape, dtype=inputs.dtype,
                    initializer=v1.zeros_initializer(), collections=collections,
                    trainable=trainable,
                )  # fmt: skip
            if scale:
                gamma = v1.get_variable(
                    "gamma", shape=params_shape, dtype=inputs.dtype,
                    initializer=v1.ones_initializer(), collections=collections,
                    trainable=trainable,
                )  # fmt: skip
            norm_axes = list(range(begin_norm_axis, rank))
            mean, variance = v1.nn.moments(inputs, norm_axes, keep_dims=True)
            eps = 1e-12 if inputs.dtype != v1.float16 else 1e-3
            outputs = v1.nn.batch_normalization(
                inputs, mean, variance, offset=beta, scale=gamma, variance_epsilon=eps
            )
            outputs.set_shape(shape)
            if activation_fn is not None:
                outputs = activation_fn(outputs)
            return outputs

    _register_contrib_layers(layer_norm)
    return (
        "tensorflow.contrib.layers.layer_norm: sys.modules shim (contrib's code path: "
        "LayerNorm/{beta,gamma} via get_variable, tf.nn.moments, batch_normalization eps 1e-12)"
    )


def _register_contrib_layers(layer_norm) -> None:
    contrib = types.ModuleType("tensorflow.contrib")
    contrib_layers = types.ModuleType("tensorflow.contrib.layers")
    contrib_layers.layer_norm = layer_norm
    contrib.layers = contrib_layers
    sys.modules["tensorflow.contrib"] = contrib
    sys.modules["tensorflow.contrib.layers"] = contrib_layers


def _shim_estimator(v1) -> str | None:
    """util/training_utils.py subclasses tf.estimator.SessionRunHook at import time."""
    if not hasattr(v1, "estimator"):
        v1.estimator = types.SimpleNamespace(
            SessionRunHook=v1.train.SessionRunHook, SessionRunArgs=v1.train.SessionRunArgs
        )
        return (
            "tf.compat.v1.estimator (removed in TF 2.16): namespace with SessionRunHook/"
            "SessionRunArgs from tf.compat.v1.train (import-time base class of ETAHook only)"
        )
    return None


def _shim_layers(v1, dense_mode: str) -> str:
    """tf.layers.dense: tf_keras' legacy TF1 layers (TF 2.20 routes tf.compat.v1.layers to
    Keras 3, which has none)."""
    try:
        if dense_mode == "fallback":
            raise AttributeError("fallback requested")
        v1.layers.dense  # noqa: B018
        return "tf.compat.v1.layers.dense: available as is"
    except (AttributeError, ImportError):
        try:
            if dense_mode == "fallback":
                raise ImportError("fallback requested")
            from tf_keras.api._v1.keras.__internal__.legacy import layers as legacy_layers

            legacy_layers.dense  # noqa: B018
            v1.layers = legacy_layers
            return (
                "tf.compat.v1.layers: set to tf_keras.api._v1.keras.__internal__.legacy.layers "
                "(tf_keras' legacy tf.layers.dense, get_variable-based, TF1 scope naming)"
            )
        except Exception:  # noqa: BLE001
            v1.layers = types.SimpleNamespace(dense=_dense_fallback(v1))
            return "tf.compat.v1.layers.dense: get_variable-based fallback shim"


def _dense_fallback(v1):
    def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
              bias_initializer=None, name=None, **unused):  # fmt: skip
        with v1.variable_scope(name, default_name="dense"):
            width = inputs.shape[-1]
            kernel = v1.get_variable(
                "kernel", [width, units],
                initializer=kernel_initializer or v1.glorot_uniform_initializer(),
            )  # fmt: skip
            rank = inputs.shape.ndims
            if rank > 2:
                out = v1.tensordot(inputs, kernel, [[rank - 1], [0]])
            else:
                out = v1.matmul(inputs, kernel)
            if use_bias:
                bias = v1.get_variable(
                    "bias", [units], initializer=bias_initializer or v1.zeros_initializer()
                )
                out = v1.nn.bias_add(out, bias)
            return activation(out) if activation is not None else out

    return dense


def import_original(orig_dir):
    sys.path.insert(0, orig_dir)
    import configure_pretraining
    import run_pretraining
    from model import modeling, optimization
    from pretrain import pretrain_data, pretrain_helpers

    mods = {
        "configure_pretraining": configure_pretraining,
        "run_pretraining": run_pretraining,
        "modeling": modeling,
        "optimization": optimization,
        "pretrain_data": pretrain_data,
        "pretrain_helpers": pretrain_helpers,
    }
    for name, mod in mods.items():
        if not os.path.abspath(mod.__file__).startswith(os.path.abspath(orig_dir)):
            raise SystemExit(f"ERROR: imported {name} from {mod.__file__}, not from {orig_dir}")
    return types.SimpleNamespace(**mods)


@contextlib.contextmanager
def project_draws(orig, draws, on_sample=None):
    """While active, the original's `pretrain_helpers.mask` returns the project's masking and
    its `sample_from_softmax` the one-hot of the project's samples. `draws`: int32 tensors
    (constants or placeholders) `masked_input_ids`, `masked_lm_positions`, `masked_lm_ids`,
    `sampled_ids` and float32 `masked_lm_weights`; `on_sample(logits, disallow)` is called with
    what the original's sampler was given (for side checks)."""
    import tensorflow.compat.v1 as v1

    ph, pd = orig.pretrain_helpers, orig.pretrain_data

    def project_mask(config, inputs, mask_prob, *a, **k):
        return pd.get_updated_inputs(
            inputs,
            input_ids=draws["masked_input_ids"],
            masked_lm_positions=draws["masked_lm_positions"],
            masked_lm_ids=draws["masked_lm_ids"],
            masked_lm_weights=draws["masked_lm_weights"],
        )

    def project_sample(logits, disallow=None):
        if on_sample is not None:
            on_sample(logits, disallow)
        return v1.one_hot(draws["sampled_ids"], logits.shape[-1])

    with patched(ph, "mask", project_mask), patched(ph, "sample_from_softmax", project_sample):
        yield


class OriginalSide:
    """The original's model, losses, optimizer and schedule in one TF1 graph and session, fed
    each step's batch and the project's draws through placeholders (the trajectory check's
    original). With `perturb_seed`, every weight moves by one float32 ulp in a random direction
    after the restore and after every update (the drift reference)."""

    def __init__(
        self, orig, hp: dict, workdir: str, ckpt_prefix: str, threads: int, perturb_seed=None
    ):
        import tensorflow.compat.v1 as v1

        self.graph = v1.Graph()
        with self.graph.as_default():
            tvars, saver = self._build(orig, hp, workdir, v1)
            self.perturb = None
            if perturb_seed is not None:
                ops = []
                for i, v in enumerate(sorted(tvars, key=lambda x: x.name)):
                    up = v1.random.uniform(v.shape, seed=perturb_seed + i) < 0.5
                    target = v1.where(
                        up, v1.fill(v.shape, float("inf")), v1.fill(v.shape, float("-inf"))
                    )
                    ops.append(v.assign(v1.math.nextafter(v, target)))
                self.perturb = v1.group(*ops)
            init = v1.global_variables_initializer()
            self.graph.finalize()
        self.sess = v1.Session(graph=self.graph, config=session_config(threads))
        with self.graph.as_default():  # a TF1 Saver restores in graph mode only
            self.sess.run(init)
            saver.restore(self.sess, ckpt_prefix)
        if self.perturb is not None:
            self.sess.run(self.perturb)

    def _build(self, orig, hp: dict, workdir: str, v1):
        """The graph's model and train op; sets features, draws, model_vars and fetch, returns
        the trainable variables and a Saver (weights and global_step)."""
        rp, opt_mod = orig.run_pretraining, orig.optimization
        B, S = BATCH, SEQ
        hp = dict(hp, vocab_file=os.path.join(workdir, "vocab.txt"))
        captured = {}
        real_disc_out = rp.PretrainingModel._get_discriminator_output
        real_apply = opt_mod.AdamWeightDecayOptimizer.apply_gradients

        def cap_disc_out(self_, *a, **k):
            captured["disc"] = real_disc_out(self_, *a, **k)
            return captured["disc"]

        def cap_apply(self_, grads_and_vars, *a, **k):
            captured["lr"] = self_.learning_rate
            # The optimizer's update alone: create_optimizer's step increment is unordered.
            captured["apply_op"] = real_apply(self_, list(grads_and_vars), *a, **k)
            return captured["apply_op"]

        self.features = {
            k: v1.placeholder(v1.int32, [B, S], name=k)
            for k in ("input_ids", "input_mask", "segment_ids")
        }
        config = orig.configure_pretraining.PretrainingConfig("trajectory", workdir, **hp)
        N = config.max_predictions_per_seq
        self.draws = {
            "masked_input_ids": v1.placeholder(v1.int32, [B, S]),
            "masked_lm_positions": v1.placeholder(v1.int32, [B, N]),
            "masked_lm_ids": v1.placeholder(v1.int32, [B, N]),
            "masked_lm_weights": v1.placeholder(v1.float32, [B, N]),
            "sampled_ids": v1.placeholder(v1.int32, [B, N]),
        }
        with contextlib.ExitStack() as stack:
            stack.enter_context(project_draws(orig, self.draws))
            stack.enter_context(
                patched(rp.PretrainingModel, "_get_discriminator_output", cap_disc_out)
            )
            model = rp.PretrainingModel(config, dict(self.features), True)
        with patched(opt_mod.AdamWeightDecayOptimizer, "apply_gradients", cap_apply):
            # As run_pretraining.model_fn_builder calls it.
            opt_mod.create_optimizer(
                model.total_loss, config.learning_rate, config.num_train_steps,
                weight_decay_rate=config.weight_decay_rate, use_tpu=config.use_tpu,
                warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
            )  # fmt: skip
        global_step = v1.train.get_global_step()
        with v1.control_dependencies([captured["apply_op"]]):
            step_op = global_step.assign_add(1)
        tvars = v1.trainable_variables()
        self.model_vars = {v.name.split(":")[0]: v for v in tvars}
        saver = v1.train.Saver(var_list={**self.model_vars, "global_step": global_step})
        self.fetch = {
            "step": step_op,
            "total": model.total_loss,
            "generator": model.mlm_output.loss,
            "discriminator": captured["disc"].loss,
            "lr": captured["lr"],
        }
        return tvars, saver

    def step(self, batch: dict, draws: dict) -> dict:
        feed = {self.features[k]: batch[k] for k in self.features}
        feed.update({self.draws[k]: draws[k] for k in self.draws})
        res = self.sess.run(self.fetch, feed)
        if self.perturb is not None:
            self.sess.run(self.perturb)
        return {k: float(res[k]) for k in ("total", "generator", "discriminator", "lr")}

    def weights(self) -> dict:
        return self.sess.run(self.model_vars)
