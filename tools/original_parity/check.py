"""Parity check: electra_tf (TF2 / tf_keras) against the ORIGINAL google-research/electra code.

The original TF1 files are extracted from a git mirror at run time (nothing of them is copied
here) and run unchanged under tf.compat.v1 graph mode. Only missing library pieces are shimmed
(`tensorflow.contrib.layers.layer_norm`, `tf.compat.v1.estimator.SessionRunHook`, and
`tf.compat.v1.layers` routed to tf_keras' legacy layers) and the random parts are replaced by
the project's draws:

- `pretrain_helpers.mask` returns the project's masked inputs (positions, ids, weights, masked
  input ids), and `pretrain_helpers.sample_from_softmax` returns the one-hot of the project's
  sampled ids, so both sides see the same masking and the same fake tokens;
- side checks run the ORIGINAL `mask` and `sample_from_softmax` with only their
  `tf.random.categorical` / `tf.random.uniform` calls replaced by the project's draws, and
  compare what they produce with the project's output.

Per scenario it compares: configs, generator MLM loss, discriminator loss, total loss, MLM
logits, discriminator logits and probabilities, fake input ids, discriminator labels (and with
Electric the cloze loss, the cloze logits at every position and the cloze weights), the
gradient of the total loss for every variable (names from the project's `variable_map()`), and
the weights after one optimizer step (what the original's `optimization.create_optimizer`
builds: its schedule, global-norm clipping and `AdamWeightDecayOptimizer.apply_gradients`
update, vs the project's `build_optimizer` + `ElectraPretrainer.train_update`) from the same
state at a step with a non-zero learning rate: once with fresh Adam slots, once with random
(identical) slots so that the gradient scale after clipping matters.

The original's whole train op also increments global_step in the same `tf.group`, with no
control dependency on the learning rate's read of global_step (model/optimization.py:35-66),
so which step's rate it applies depends on the executor's op order. The gated comparison runs
the optimizer's update op at global_step = k (the rate of step k, as the project's and as the
original's own schedule evaluated alone); the whole train op is run too and reported, not
gated.

Tolerances: losses, logits, probabilities and every gradient within --rtol (1e-5) of the
original's max |value|, with two rules for what is rounding by construction: attention query
and key weights (whose gradient is the upstream gradient through the softmax Jacobian, small
where the scores barely move the loss; a key bias's is 0 analytically) at the scale of their
attention block's query, key and value kernel gradients; the two-tower cloze logits
at padding positions, where the right-to-left query sees only masked keys and every score
carries the -10000 mask bias (float32 ulp ~1e-3), within 1e-3 (`PADDING_CLOZE_RTOL`). Ids,
labels, masks exactly; post-step weights within --step-rtol (1e-3) of max(the variable's max
|update|, lr).

Usage, from the repository root (tools/original_parity/README.md):
    .venv/bin/python -m tools.original_parity.check --mirror <git copy of google-research/electra>
Exit status 0 when every difference is within tolerance, 1 otherwise (the failures are listed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
import warnings

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MIRROR = os.environ.get(
    "ELECTRA_ORIGINAL_MIRROR", ""
)  # bare git dir of google-research/electra

# Synthetic vocabulary in BERT's layout.
VOCAB_SIZE = 200
PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103
BATCH, SEQ = 4, 32
LENGTHS = (32, 25, 18, 9)  # real tokens per sequence ([CLS]/[SEP] included); 32 = no padding
PADDING_CLOZE_RTOL = 1e-3  # cloze logits at padding positions (see compare())
OPT_STEP = 4  # global step of the compared update: lr = 5e-4 * (1 - 4/100) * min(1, 4/10)
NUM_TRAIN_STEPS, WARMUP = 100, 10

BASE_HPARAMS = {
    "vocab_size": VOCAB_SIZE,
    "embedding_size": 32,
    "max_seq_length": SEQ,
    "mask_prob": 0.15,
    "gen_weight": 1.0,
    "disc_weight": 50.0,
    "temperature": 1.0,
    "generator_layers": 0.5,
    "learning_rate": 5e-4,
    "lr_decay_power": 1.0,
    "weight_decay_rate": 0.01,
    "num_train_steps": NUM_TRAIN_STEPS,
    "num_warmup_steps": WARMUP,
    "train_batch_size": BATCH,
    "model_size": "small",
    "model_hparam_overrides": {
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
}

SCENARIOS = [
    {
        "name": "A_dup",
        "what": "gen hidden 32 (x1/2, = embedding size: no generator projection), "
        "2 of 4 layers; positions with replacement, a duplicated masked position whose two "
        "samples differ (floor-average quirk)",
        "hparams": {"generator_hidden_size": 0.5},
        "want_duplicate": True,
    },
    {
        "name": "B_proj",
        "what": "gen hidden 16 (x1/4, != embedding size: generator/embeddings_project), "
        "2 of 4 layers; no duplicated position",
        "hparams": {"generator_hidden_size": 0.25},
        "want_duplicate": False,
    },
    {
        "name": "C_electric",
        "what": "Electric (electric_objective): two-tower cloze generator, towers "
        "generator_ltr / generator_rtl 16 wide (x1/4, each its own embeddings_project onto the "
        "shared electra/embeddings), 2 of 4 layers, head cloze_predictions; disc logit = "
        "energy + log q + log(mask_prob / (1 - mask_prob)), every sampled position labelled "
        "noise; a duplicated masked position whose two samples differ",
        "hparams": {"electric_objective": True, "generator_hidden_size": 0.25},
        "want_duplicate": True,
    },
    {
        "name": "D_electric_untied",
        "what": "Electric with untied_generator_embeddings: each tower owns 16-wide "
        "embeddings (generator_ltr/embeddings, generator_rtl/embeddings), the cloze head tied to "
        "the ltr tower's table; no duplicated position",
        "hparams": {
            "electric_objective": True,
            "generator_hidden_size": 0.25,
            "untied_generator_embeddings": True,
        },
        "want_duplicate": False,
    },
]


# ============================================================================ helpers
def log(msg: str = "") -> None:
    print(msg, flush=True)


def group_of(name: str) -> str:
    for prefix, label in (
        ("electra/embeddings/", "shared embeddings"),
        ("electra/embeddings_project/", "disc embeddings_project"),
        ("electra/encoder/", "disc encoder"),
        ("generator/embeddings/", "gen own embeddings"),
        ("generator/embeddings_project/", "gen embeddings_project"),
        ("generator/encoder/", "gen encoder"),
        ("generator_predictions/", "generator_predictions"),
        ("discriminator_predictions/", "discriminator_predictions"),
        ("generator_ltr/embeddings/", "ltr tower own embeddings"),
        ("generator_ltr/embeddings_project/", "ltr tower embeddings_project"),
        ("generator_ltr/encoder/", "ltr tower encoder"),
        ("generator_rtl/embeddings/", "rtl tower own embeddings"),
        ("generator_rtl/embeddings_project/", "rtl tower embeddings_project"),
        ("generator_rtl/encoder/", "rtl tower encoder"),
        ("cloze_predictions/", "cloze_predictions"),
    ):
        if name.startswith(prefix):
            return label
    return "other"


def make_batch(np):
    """4 sequences [CLS] a [SEP] b [SEP] + padding, two segments; a literal [MASK] and [UNK]."""
    rs = np.random.RandomState(7)
    ids = np.zeros([BATCH, SEQ], np.int32)
    mask = np.zeros([BATCH, SEQ], np.int32)
    seg = np.zeros([BATCH, SEQ], np.int32)
    for b, n in enumerate(LENGTHS):
        len_a = (n - 3) // 2
        len_b = n - 3 - len_a
        a = rs.randint(104, VOCAB_SIZE, size=len_a)
        bb = rs.randint(104, VOCAB_SIZE, size=len_b)
        row = [CLS, *a, SEP, *bb, SEP]
        ids[b, :n] = row
        mask[b, :n] = 1
        seg[b, len_a + 2 : n] = 1
    ids[0, 3] = MASK  # not a masking candidate on either side
    ids[1, 2] = UNK
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg}


def write_vocab(path: str) -> None:
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"w{i}" for i in range(len(tokens), VOCAB_SIZE)]
    assert len(tokens) == VOCAB_SIZE and tokens[MASK] == "[MASK]"
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")


MIRROR_HELP = (
    "the original's code comes from a git copy of google-research/electra: get one with\n"
    "    git clone --mirror https://github.com/google-research/electra electra.git\n"
    "(or use any local clone) and pass --mirror electra.git or set ELECTRA_ORIGINAL_MIRROR"
)


def resolve_mirror(mirror: str) -> str:
    """The git directory of a bare mirror or of a clone's work tree; SystemExit (naming how to
    get one) when `mirror` is empty or not a git copy."""
    if not mirror:
        raise SystemExit(
            f"ERROR: no --mirror given and ELECTRA_ORIGINAL_MIRROR is not set;\n{MIRROR_HELP}"
        )
    if os.path.isdir(os.path.join(mirror, ".git")):
        mirror = os.path.join(mirror, ".git")
    if not (os.path.isdir(mirror) and os.path.exists(os.path.join(mirror, "HEAD"))):
        raise SystemExit(
            f"ERROR: no git copy of google-research/electra at {mirror!r};\n{MIRROR_HELP}"
        )
    return mirror


def extract_original(mirror: str, rev: str, dest: str) -> str:
    mirror = resolve_mirror(mirror)
    git = ["git", "--git-dir", mirror]
    commit = subprocess.run(
        [*git, "rev-parse", rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    tar = subprocess.run([*git, "archive", "--format=tar", commit], check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        if hasattr(tarfile, "data_filter"):
            t.extractall(dest, filter="data")
        else:
            t.extractall(dest)
    return commit


# ============================================================================ project side
# Where the training run's `build_optimizer(config, model)` lives: here, and in checkouts from
# before the runs layer (`--project` may point at an older one to compare).
BUILD_OPTIMIZER_MODULES = ("electra_tf.runs.pretraining_model", "electra_tf.pretraining.loop")


def find_build_optimizer():
    """The project's `build_optimizer(config, model)`: the optimizer its training run builds."""
    import importlib

    for where in BUILD_OPTIMIZER_MODULES:
        try:
            return importlib.import_module(where).build_optimizer
        except (ImportError, AttributeError):
            continue
    raise SystemExit(
        "ERROR: no build_optimizer(config, model) found in the project (looked in "
        + ", ".join(BUILD_OPTIMIZER_MODULES)
        + ")"
    )


def project_phase(scen, batch, workdir, args, np, tf):
    """Runs the project: forward + gradients, export, optimizer steps. Returns numpy results."""

    import electra_tf  # the public API survives moves of modules

    pretraining_config = electra_tf.pretraining_config
    ElectraPretrainer = electra_tf.ElectraPretrainer
    save_weights = electra_tf.save_weights
    build_optimizer = find_build_optimizer()

    hp = dict(BASE_HPARAMS, **scen["hparams"])
    hp.update(precision="float32", jit_compile=False, seed=0)
    config = pretraining_config("parity", workdir, hparams=hp)
    model = ElectraPretrainer(config, cls_id=CLS, sep_id=SEP, mask_id=MASK)
    vmap = model.variable_map()
    names = sorted(vmap)
    trainable = {id(v) for v in model.trainable_variables}
    problems = []
    if trainable != {id(v) for v in vmap.values()} or len(model.trainable_variables) != len(vmap):
        problems.append("project: trainable_variables != variable_map() values")

    # Perturb every weight (LayerNorm gammas around 1) so biases, norms and gelu all matter.
    rs = np.random.RandomState(1234)
    for n in names:
        shape = vmap[n].shape.as_list()
        value = rs.normal(0.0, args.weight_std, size=shape)
        if n.endswith("LayerNorm/gamma"):
            value += 1.0
        vmap[n].assign(value.astype(np.float32))
    w0 = {n: vmap[n].numpy() for n in names}

    inputs = {k: tf.constant(v, tf.int32) for k, v in batch.items()}

    def duplicates(out):
        pos = out["masked_lm_positions"].numpy()
        act = out["masked_lm_weights"].numpy() > 0
        smp = out["sampled_ids"].numpy()
        dup, dup_diff = [], []
        for b in range(pos.shape[0]):
            slots = [i for i in range(pos.shape[1]) if act[b, i]]
            for x in range(len(slots)):
                for y in range(x + 1, len(slots)):
                    i, j = slots[x], slots[y]
                    if pos[b, i] == pos[b, j]:
                        dup.append((b, i, j, int(pos[b, i])))
                        if smp[b, i] != smp[b, j]:
                            dup_diff.append(
                                (b, i, j, int(pos[b, i]), int(smp[b, i]), int(smp[b, j]))
                            )
        return dup, dup_diff

    # The project has no API to force positions: scan seeds of its masking/sampling RNG.
    chosen = None
    for seed in range(args.max_seed_scan):
        model.rng.reset_from_seed(seed)
        state = model.rng.state.numpy().copy()
        dup, dup_diff = duplicates(model(inputs, training=True))
        ok = bool(dup_diff) if scen["want_duplicate"] else not dup
        if ok:
            chosen = (seed, state, dup, dup_diff)
            break
    if chosen is None:
        problems.append(f"project: no seed < {args.max_seed_scan} gave the wanted masking draw")
        model.rng.reset_from_seed(0)
        chosen = (0, model.rng.state.numpy().copy(), [], [])
    seed, state, dup, dup_diff = chosen

    # Forward (training=True, dropout 0) and gradients of the total loss.
    model.rng.reset(state)
    with tf.GradientTape() as tape:
        out = model(inputs, training=True)
        loss = out["loss"]
    grads = tape.gradient(loss, [vmap[n] for n in names])
    res = {k: v.numpy() for k, v in out.items()}
    res["grads"] = {}
    for n, g in zip(names, grads, strict=True):
        if g is None:
            problems.append(f"project: no gradient for {n}")
            g = tf.zeros_like(vmap[n])
        res["grads"][n] = tf.convert_to_tensor(g).numpy()

    # Reproduce the project's draws (for the side checks on the original's own mask/sampling).
    gen = tf.random.Generator.from_state(state, alg=model.rng.algorithm)
    seeds = gen.make_seeds(2)
    seed32 = tf.cast(seeds[:, 0], tf.int32)
    _, mask_seed = tf.unstack(tf.random.experimental.stateless_split(seed32, 2))
    res["mask_uniform"] = tf.random.stateless_uniform(
        [BATCH, config.max_predictions_per_seq], mask_seed
    ).numpy()
    res["gumbel_uniform"] = tf.random.stateless_uniform(
        tf.shape(out["mlm_logits"]), seeds[:, 1], dtype=tf.float32
    ).numpy()

    # Export the weights in the original layout with the project's converter.
    ckpt_dir = os.path.join(workdir, "original_ckpt")
    save_weights(model, ckpt_dir, "original", global_step=OPT_STEP)
    prefix = os.path.join(ckpt_dir, f"model.ckpt-{OPT_STEP}")

    # One optimizer step, the training loop's way: build_optimizer + compile + train_update.
    optimizer = build_optimizer(config, model)
    model.compile(optimizer=optimizer)
    step_fn = tf.function(model.train_update)
    res["lr"] = float(optimizer._learning_rate(OPT_STEP))
    slot_map = optimizer.slot_map()
    rs_slots = np.random.RandomState(99)
    random_slots = {}
    for key in sorted(slot_map):
        shape = slot_map[key].shape.as_list()
        if key.endswith("/adam_m"):
            random_slots[key] = (args.slot_scale * rs_slots.normal(size=shape)).astype(np.float32)
        else:
            random_slots[key] = (
                (args.slot_scale * (0.5 + rs_slots.uniform(size=shape))) ** 2
            ).astype(np.float32)
    res["post"] = {}
    for mode in ("fresh", "random_slots"):
        for n in names:
            vmap[n].assign(w0[n])
        for key, var in slot_map.items():
            var.assign(
                random_slots[key] if mode == "random_slots" else np.zeros(var.shape, np.float32)
            )
        optimizer.iterations.assign(OPT_STEP)
        for metric in model.metrics:
            metric.reset_state()
        model.rng.reset(state)  # the same masking and samples as the forward above
        step_fn(inputs)
        if int(optimizer.iterations.numpy()) != OPT_STEP + 1:
            problems.append(
                f"project: iterations after the step = {int(optimizer.iterations.numpy())}"
            )
        values = {m.name: float(m.result()) for m in model.metrics}
        step_loss = values.get("loss")
        if step_loss is None or abs(step_loss - float(res["loss"])) > 1e-5 * abs(
            float(res["loss"])
        ):
            problems.append(
                f"project: train_update's loss {step_loss} != the forward's {float(res['loss'])} "
                "(not the same draw)"
            )
        res[f"step_lr_{mode}"] = values.get("learning_rate", float("nan"))
        res["post"][mode] = {n: vmap[n].numpy() for n in names}
    res["w0"] = w0
    res["names"] = names
    res["random_slots"] = random_slots
    res["ckpt_prefix"] = prefix
    res["seed"] = seed
    res["dup"] = dup
    res["dup_diff"] = dup_diff
    res["problems"] = problems
    res["config"] = {
        "disc": config.discriminator_config().to_dict(),
        "gen": config.generator_config().to_dict(),
        "max_predictions_per_seq": config.max_predictions_per_seq,
    }
    return res


# ============================================================================ original side
class _Proxy:
    """Delegates every attribute to `real` except the overridden ones."""

    def __init__(self, real, **overrides):
        self._real = real
        self._overrides = overrides

    def __getattr__(self, name):
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._real, name)


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def install_shims(tf, dense_mode="auto"):
    """Only what TF 2.20 lacks; returns a description of each shim."""
    import tensorflow.compat.v1 as v1

    notes = []

    # tensorflow.contrib.layers.layer_norm, as contrib's (norm over the last axis here,
    # variables <scope>/LayerNorm/{beta,gamma}, variance epsilon 1e-12).
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

    contrib = types.ModuleType("tensorflow.contrib")
    contrib_layers = types.ModuleType("tensorflow.contrib.layers")
    contrib_layers.layer_norm = layer_norm
    contrib.layers = contrib_layers
    sys.modules["tensorflow.contrib"] = contrib
    sys.modules["tensorflow.contrib.layers"] = contrib_layers
    notes.append(
        "tensorflow.contrib.layers.layer_norm: sys.modules shim (contrib's code path: "
        "LayerNorm/{beta,gamma} via get_variable, tf.nn.moments, batch_normalization eps 1e-12)"
    )

    # util/training_utils.py subclasses tf.estimator.SessionRunHook at import time.
    if not hasattr(v1, "estimator"):
        v1.estimator = types.SimpleNamespace(
            SessionRunHook=v1.train.SessionRunHook, SessionRunArgs=v1.train.SessionRunArgs
        )
        notes.append(
            "tf.compat.v1.estimator (removed in TF 2.16): namespace with SessionRunHook/"
            "SessionRunArgs from tf.compat.v1.train (import-time base class of ETAHook only)"
        )

    # tf.layers.dense: tf_keras' legacy TF1 layers (TF 2.20 routes tf.compat.v1.layers to
    # Keras 3, which has none).
    try:
        if dense_mode == "fallback":
            raise AttributeError("fallback requested")
        v1.layers.dense  # noqa: B018
        notes.append("tf.compat.v1.layers.dense: available as is")
    except (AttributeError, ImportError):
        try:
            if dense_mode == "fallback":
                raise ImportError("fallback requested")
            from tf_keras.api._v1.keras.__internal__.legacy import layers as legacy_layers

            legacy_layers.dense  # noqa: B018
            v1.layers = legacy_layers
            notes.append(
                "tf.compat.v1.layers: set to tf_keras.api._v1.keras.__internal__.legacy.layers "
                "(tf_keras' legacy tf.layers.dense, get_variable-based, TF1 scope naming)"
            )
        except Exception:  # noqa: BLE001
            v1.layers = types.SimpleNamespace(dense=_dense_fallback(v1))
            notes.append("tf.compat.v1.layers.dense: get_variable-based fallback shim")
    return notes


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


def original_phase(scen, batch, proj, orig, workdir, args, np, tf):
    import tensorflow.compat.v1 as v1

    rp, ph, pd, opt_mod = (
        orig.run_pretraining,
        orig.pretrain_helpers,
        orig.pretrain_data,
        orig.optimization,
    )
    real_mask, real_sample = ph.mask, ph.sample_from_softmax
    hp = dict(BASE_HPARAMS, **scen["hparams"])
    hp["vocab_file"] = os.path.join(workdir, "vocab.txt")
    B, N = proj["masked_lm_positions"].shape

    def fake_uniform(shape, *a, **k):
        shape = list(shape)
        if len(shape) == 2:
            value = proj["mask_uniform"]
        else:
            value = proj["gumbel_uniform"]
        assert list(value.shape) == shape, (value.shape, shape)
        return v1.constant(value, v1.float32)

    def fake_categorical(logits, num_samples, dtype=None, *a, **k):
        assert num_samples == N
        return v1.constant(proj["masked_lm_positions"], dtype or v1.int64)

    random_proxy = _Proxy(v1.random, uniform=fake_uniform, categorical=fake_categorical)
    tf_proxy = _Proxy(v1, random=random_proxy)
    captured = {}

    def on_sample(logits, disallow):
        # Side check: the ORIGINAL sampler on the ORIGINAL logits, with the project's noise.
        with patched(ph, "tf", tf_proxy):
            captured["orig_sample_onehot"] = real_sample(logits, disallow=disallow)

    real_fake_data = rp.PretrainingModel._get_fake_data
    real_disc_out = rp.PretrainingModel._get_discriminator_output
    real_cloze_out = rp.PretrainingModel._get_cloze_outputs

    def cap_fake_data(self, *a, **k):
        captured["fake"] = real_fake_data(self, *a, **k)
        return captured["fake"]

    def cap_disc_out(self, *a, **k):
        captured["disc"] = real_disc_out(self, *a, **k)
        return captured["disc"]

    def cap_cloze_out(self, *a, **k):
        captured["cloze"] = real_cloze_out(self, *a, **k)
        return captured["cloze"]

    real_apply = opt_mod.AdamWeightDecayOptimizer.apply_gradients

    def cap_apply(self, grads_and_vars, *a, **k):
        grads_and_vars = list(grads_and_vars)
        captured["lr"] = self.learning_rate
        captured["clipped"] = grads_and_vars
        # The optimizer's own update (clipped grads, Adam, decay) without create_optimizer's
        # global_step increment, which runs in a tf.group with no control dependency on the
        # learning rate's read of global_step (see the report's race note).
        captured["apply_op"] = real_apply(self, grads_and_vars, *a, **k)
        return captured["apply_op"]

    graph = v1.Graph()
    with graph.as_default():
        features = {k: v1.constant(v, v1.int32) for k, v in batch.items()}
        draws = {
            "masked_input_ids": v1.constant(proj["masked_input_ids"], v1.int32),
            "masked_lm_positions": v1.constant(proj["masked_lm_positions"], v1.int32),
            "masked_lm_ids": v1.constant(proj["masked_lm_ids"], v1.int32),
            "masked_lm_weights": v1.constant(proj["masked_lm_weights"], v1.float32),
            "sampled_ids": v1.constant(proj["sampled_ids"], v1.int32),
        }
        config = orig.configure_pretraining.PretrainingConfig("parity", workdir, **hp)
        with contextlib.ExitStack() as stack:
            stack.enter_context(project_draws(orig, draws, on_sample))
            stack.enter_context(patched(rp.PretrainingModel, "_get_fake_data", cap_fake_data))
            stack.enter_context(
                patched(rp.PretrainingModel, "_get_discriminator_output", cap_disc_out)
            )
            stack.enter_context(patched(rp.PretrainingModel, "_get_cloze_outputs", cap_cloze_out))
            model = rp.PretrainingModel(config, features, True)
        bert_config = model._bert_config
        gen_config = rp.get_generator_config(config, bert_config)

        # Side checks: the original's own masking with the project's draws, and candidates.
        unmasked = pd.features_to_inputs(features)
        with patched(ph, "tf", tf_proxy):
            orig_masked = real_mask(config, unmasked, config.mask_prob)
        candidates = ph.get_candidates_mask(config, unmasked)

        tvars = v1.trainable_variables()
        if len({id(v) for v in tvars}) != len(tvars):
            raise SystemExit("ERROR: a variable is listed twice in TRAINABLE_VARIABLES")
        grads = v1.gradients(model.total_loss, tvars)
        dense_grads = [
            v1.convert_to_tensor(g) if g is not None else v1.zeros_like(v)
            for g, v in zip(grads, tvars, strict=True)
        ]
        missing_grads = [v.name for g, v in zip(grads, tvars, strict=True) if g is None]
        with patched(opt_mod.AdamWeightDecayOptimizer, "apply_gradients", cap_apply):
            # As run_pretraining.model_fn_builder calls it.
            train_op = opt_mod.create_optimizer(
                model.total_loss, config.learning_rate, config.num_train_steps,
                weight_decay_rate=config.weight_decay_rate, use_tpu=config.use_tpu,
                warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
            )  # fmt: skip
        model_vars = {v.name.split(":")[0]: v for v in tvars}
        global_step = v1.train.get_global_step()
        saver = v1.train.Saver(var_list={**model_vars, "global_step": global_step})
        slot_vars = {
            v.name.split(":")[0]: v
            for v in v1.global_variables()
            if v.name.split(":")[0].endswith(("/adam_m", "/adam_v"))
        }
        slot_feed = {}
        for name, var in slot_vars.items():
            ph_ = v1.placeholder(v1.float32, var.shape)
            slot_feed[name] = (ph_, var.assign(ph_))
        gs_value = v1.placeholder(v1.int64, [])
        gs_assign = global_step.assign(gs_value)
        init = v1.global_variables_initializer()
        fetch = {
            "mlm_loss": model.mlm_output.loss,
            "mlm_logits": model.mlm_output.logits,
            "mlm_per_example": model.mlm_output.per_example_loss,
            "total_loss": model.total_loss,
            "disc_loss": captured["disc"].loss,
            "disc_probs": captured["disc"].probs,
            # The input of the Sigmoid that makes `probs`: the logits the loss is taken of (with
            # Electric, energy + log q + the prior).
            "disc_logits": captured["disc"].probs.op.inputs[0],
            "disc_per_example": captured["disc"].per_example_loss,
            "disc_labels": captured["fake"].is_fake_tokens,
            "fake_input_ids": captured["fake"].inputs.input_ids,
            "orig_sample_ids": v1.argmax(captured["orig_sample_onehot"], -1, output_type=v1.int32),
            "orig_mask_input_ids": orig_masked.input_ids,
            "orig_mask_ids": orig_masked.masked_lm_ids,
            "orig_mask_weights": orig_masked.masked_lm_weights,
            "orig_mask_positions": orig_masked.masked_lm_positions,
            "candidates": candidates,
            "grads": dict(zip(model_vars, dense_grads, strict=True)),
            "global_step": global_step,
        }
        if "cloze" in captured:  # the two-tower generator (Electric)
            fetch["cloze_loss"] = captured["cloze"].loss
            fetch["cloze_logits"] = captured["cloze"].logits
            fetch["cloze_weights"] = captured["cloze"].weights
            fetch["cloze_per_position"] = captured["cloze"].per_example_loss
        graph.finalize()

    session_config = v1.ConfigProto(
        intra_op_parallelism_threads=args.threads, inter_op_parallelism_threads=1
    )
    # Grappler's TF1-graph passes only log errors on this graph (and fall back); skip them.
    session_config.graph_options.rewrite_options.disable_meta_optimizer = True
    res = {"missing_grads": missing_grads}
    with v1.Session(graph=graph, config=session_config) as sess:
        sess.run(init)
        ckpt_names = {n for n, _ in v1.train.list_variables(proj["ckpt_prefix"])}
        res["ckpt_extra"] = sorted(ckpt_names - set(model_vars) - {"global_step"})
        saver.restore(sess, proj["ckpt_prefix"])  # fails loudly on a missing name / shape
        res.update(sess.run(fetch))
        res["lr"] = float(sess.run(captured["lr"]))
        sess.run(gs_assign, {gs_value: OPT_STEP + 1})  # the schedule one step later
        res["lr_next"] = float(sess.run(captured["lr"]))
        res["global_norm"] = float(
            np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in res["grads"].values()))
        )
        res["post"] = {}
        # "fresh" / "random_slots": the optimizer's update op at global_step = OPT_STEP;
        # "train_op": create_optimizer's whole train op (update + racing step increment).
        for mode in ("fresh", "random_slots", "train_op"):
            saver.restore(sess, proj["ckpt_prefix"])  # weights and global_step = OPT_STEP
            feed = {}
            for name, (ph_, _) in slot_feed.items():
                if mode == "random_slots":
                    feed[ph_] = proj["random_slots"][name]
                else:
                    feed[ph_] = np.zeros(ph_.shape.as_list(), np.float32)
            sess.run([op for _, op in slot_feed.values()], feed)
            sess.run(train_op if mode == "train_op" else captured["apply_op"])
            res["post"][mode] = sess.run(model_vars)
            res[f"global_step_after_{mode}"] = int(sess.run(global_step))
    res["names"] = sorted(model_vars)
    res["slot_names"] = sorted(slot_vars)
    res["bert_config"] = dict(bert_config.__dict__)
    res["gen_config"] = dict(gen_config.__dict__)
    res["embedding_size"] = config.embedding_size
    res["max_predictions_per_seq"] = config.max_predictions_per_seq
    return res


# ============================================================================ comparison
class Report:
    def __init__(self, rtol):
        self.rtol = rtol
        self.rows = []
        self.failures = []

    def close(self, label, got, ref, rtol=None, floor=0.0):
        import numpy as np

        rtol = self.rtol if rtol is None else rtol
        got = np.asarray(got, np.float64)
        ref = np.asarray(ref, np.float64)
        if got.shape != ref.shape:
            self.fail(label, f"shape {got.shape} != {ref.shape}")
            return None
        diff = float(np.max(np.abs(got - ref))) if got.size else 0.0
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        ok = diff <= rtol * max(scale, floor)
        self.rows.append((label, diff, scale, diff / scale if scale else 0.0, ok))
        if not ok:
            self.failures.append(
                f"{label}: max|diff| {diff:.3e} > {rtol:g} x {max(scale, floor):.3e}"
            )
        return diff

    def exact(self, label, got, ref):
        import numpy as np

        got, ref = np.asarray(got), np.asarray(ref)
        if got.shape != ref.shape:
            self.fail(label, f"shape {got.shape} != {ref.shape}")
            return
        bad = int(np.sum(got != ref))
        diff = float(np.max(np.abs(got.astype(np.float64) - ref))) if got.size else 0.0
        self.rows.append((label + " (exact)", diff, float(np.max(np.abs(ref))), bad, bad == 0))
        if bad:
            self.failures.append(f"{label}: {bad} of {got.size} entries differ")

    def fail(self, label, msg):
        self.rows.append((label, float("nan"), float("nan"), float("nan"), False))
        self.failures.append(f"{label}: {msg}")


per_var = {}


def compare(scen, proj, orig, rep, args, np):
    tag = scen["name"]
    # Configs.
    keys = [
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size", "hidden_act", "hidden_dropout_prob",
        "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
        "initializer_range",
    ]  # fmt: skip
    for which, mine, theirs in (
        ("disc", proj["config"]["disc"], orig["bert_config"]),
        ("gen", proj["config"]["gen"], orig["gen_config"]),
    ):
        diffs = {k: (mine.get(k), theirs.get(k)) for k in keys if mine.get(k) != theirs.get(k)}
        if diffs:
            rep.fail(f"{tag} {which} config", f"project vs original {diffs}")
    if proj["config"]["disc"]["embedding_size"] != orig["embedding_size"]:
        rep.fail(
            f"{tag} embedding_size",
            f"{proj['config']['disc']['embedding_size']} vs {orig['embedding_size']}",
        )
    if proj["config"]["max_predictions_per_seq"] != orig["max_predictions_per_seq"]:
        rep.fail(f"{tag} max_predictions_per_seq", "differs")
    # Names.
    pn, on = set(proj["names"]), set(orig["names"])
    if pn != on:
        rep.fail(
            f"{tag} variable names",
            f"only project: {sorted(pn - on)[:8]}; only original: {sorted(on - pn)[:8]}",
        )
    if orig["ckpt_extra"]:
        rep.fail(f"{tag} checkpoint", f"names the original graph lacks: {orig['ckpt_extra'][:8]}")
    if orig["missing_grads"]:
        rep.fail(f"{tag} original grads", f"None for {orig['missing_grads'][:8]}")
    for p in proj["problems"]:
        rep.fail(f"{tag} project", p)

    # Side checks on the original's own random helpers fed the project's draws.
    pos, w = proj["masked_lm_positions"], proj["masked_lm_weights"]
    cand = orig["candidates"]
    not_cand = [(b, i, int(pos[b, i])) for b in range(pos.shape[0]) for i in range(pos.shape[1])
                if w[b, i] > 0 and not cand[b, pos[b, i]]]  # fmt: skip
    if not_cand:
        rep.fail(f"{tag} masked positions", f"not original candidates: {not_cand}")
    rep.exact(
        f"{tag} side: original mask() weights", proj["masked_lm_weights"], orig["orig_mask_weights"]
    )
    rep.exact(
        f"{tag} side: original mask() positions",
        proj["masked_lm_positions"],
        orig["orig_mask_positions"],
    )
    rep.exact(
        f"{tag} side: original mask() masked_lm_ids", proj["masked_lm_ids"], orig["orig_mask_ids"]
    )
    rep.exact(
        f"{tag} side: original mask() input ids",
        proj["masked_input_ids"],
        orig["orig_mask_input_ids"],
    )
    # Sampling: first confirm the reproduced noise explains the project's own samples.
    u = proj["gumbel_uniform"].astype(np.float32)
    gumbel = -np.log(-np.log(u + np.float32(1e-9)) + np.float32(1e-9))
    own = np.argmax(proj["mlm_logits"] / 1.0 + gumbel, -1)
    if np.array_equal(own, proj["sampled_ids"]):
        rep.exact(
            f"{tag} side: original sample_from_softmax ids",
            proj["sampled_ids"],
            orig["orig_sample_ids"],
        )
    else:
        rep.rows.append((f"{tag} side: sampler (noise not reproducible: skipped)", 0, 0, 0, True))

    # Main comparison.
    rep.close(f"{tag} generator MLM loss", proj["masked_lm_loss"], orig["mlm_loss"])
    rep.close(f"{tag} discriminator loss", proj["disc_loss"], orig["disc_loss"])
    rep.close(f"{tag} total loss", proj["loss"], orig["total_loss"])
    rep.close(f"{tag} MLM logits", proj["mlm_logits"], orig["mlm_logits"])
    rep.close(f"{tag} MLM per-slot losses", proj["masked_lm_losses"], orig["mlm_per_example"])
    probs = 1.0 / (1.0 + np.exp(-proj["disc_logits"].astype(np.float64)))
    rep.close(f"{tag} disc logits", proj["disc_logits"], orig["disc_logits"])
    rep.close(f"{tag} disc probabilities", probs, orig["disc_probs"])
    mask = proj["_input_mask"].astype(np.float64)
    per_seq = (proj["disc_losses"] * mask).sum(-1) / (1e-6 + mask.sum(-1))
    rep.close(f"{tag} disc per-sequence losses", per_seq, orig["disc_per_example"])
    rep.exact(f"{tag} fake input ids", proj["fake_input_ids"], orig["fake_input_ids"])
    rep.exact(f"{tag} disc labels", proj["disc_labels"], orig["disc_labels"])
    if "cloze_loss" in orig or "cloze_loss" in proj:  # Electric's two-tower generator
        if "cloze_loss" not in orig or "cloze_loss" not in proj:
            where = "the project" if "cloze_loss" in orig else "the original"
            rep.fail(f"{tag} cloze outputs", f"{where} has no two-tower cloze model")
        else:
            # The generator's training loss, over every masking candidate of the clean input.
            rep.close(f"{tag} cloze loss", proj["cloze_loss"], orig["cloze_loss"])
            real = proj["_input_mask"].astype(bool)
            rep.close(
                f"{tag} cloze logits (real tokens)",
                proj["cloze_logits"][real],
                orig["cloze_logits"][real],
            )
            # Padding positions: no loss reads them, and there the right-to-left tower's query
            # sees no key, so every score carries the attention mask's -10000 (float32 ulp
            # 2^-10 ~ 1e-3): both sides' softmax weights there are rounding at the 1e-3 level.
            rep.close(
                f"{tag} cloze logits (padding)",
                proj["cloze_logits"][~real], orig["cloze_logits"][~real], rtol=PADDING_CLOZE_RTOL,
            )  # fmt: skip
            rep.close(
                f"{tag} cloze per-position losses",
                proj["cloze_losses"] * orig["cloze_weights"],
                orig["cloze_per_position"] * orig["cloze_weights"],
            )
            rep.exact(
                f"{tag} cloze weights (candidates)", proj["cloze_weights"], orig["cloze_weights"]
            )
    rep.close(f"{tag} learning rate at step {OPT_STEP}", proj["lr"], orig["lr"], rtol=1e-6)
    rep.close(f"{tag} lr train_update logged", proj["step_lr_fresh"], orig["lr"], rtol=1e-6)
    if orig["global_step_after_train_op"] != OPT_STEP + 1:
        rep.fail(f"{tag} original global_step", str(orig["global_step_after_train_op"]))

    # Gradients and post-step weights, per variable (gate) and per group (table).
    names = sorted(pn & on)
    groups = {}
    for n in names:
        gp, go = proj["grads"][n], orig["grads"][n]
        d = float(np.max(np.abs(gp.astype(np.float64) - go)))
        s = float(np.max(np.abs(go)))
        if "/attention/self/query/" in n or "/attention/self/key/" in n:
            # Query and key weights get their gradient through the softmax only: the upstream
            # gradient (the attention output's, whose scale the value kernel's gradient shows)
            # times the softmax Jacobian. Where the scores barely move the loss (the top layer
            # here) that product is small and its rounding stays at the upstream scale; a key
            # bias's gradient is even 0 analytically (it shifts all of a query's scores
            # alike). So they are compared at the scale of their attention block's kernels.
            block = n[: n.index("/attention/self/")] + "/attention/self/"
            s = max(
                s,
                *(
                    float(np.max(np.abs(orig["grads"][f"{block}{w}/kernel"])))
                    for w in ("query", "key", "value")
                ),
            )
        if not d <= args.rtol * s and not (d == 0.0):
            rep.failures.append(f"{tag} grad {n}: max|diff| {d:.3e} > {args.rtol:g} x {s:.3e}")
        per_var.setdefault(tag, {})[n] = {"grad_diff": d, "grad_scale": s}
        g = groups.setdefault(
            group_of(n), {"n": 0, "grad_diff": 0.0, "grad_scale": 0.0, "grad_rel": 0.0}
        )
        g["n"] += 1
        g["grad_diff"] = max(g["grad_diff"], d)
        g["grad_scale"] = max(g["grad_scale"], s)
        g["grad_rel"] = max(g["grad_rel"], d / s if s else (0.0 if d == 0 else float("inf")))
        for mode in ("fresh", "random_slots"):
            wp, wo, w0 = proj["post"][mode][n], orig["post"][mode][n], proj["w0"][n]
            d = float(np.max(np.abs(wp.astype(np.float64) - wo)))
            step = float(np.max(np.abs(wo.astype(np.float64) - w0)))
            per_var[tag][n][f"w_{mode}"] = d
            per_var[tag][n][f"upd_{mode}"] = step
            # An Adam step moves a weight by ~lr whatever its gradient; a variable whose update
            # is far below lr (a gradient at rounding level) is compared at the scale lr.
            if not d <= args.step_rtol * max(step, orig["lr"]):
                rep.failures.append(
                    f"{tag} post-step ({mode}) {n}: max|diff| {d:.3e} > {args.step_rtol:g} x "
                    f"max(max|update| {step:.3e}, lr {orig['lr']:.3e})"
                )
            g[f"w_{mode}"] = max(g.get(f"w_{mode}", 0.0), d)
            g[f"step_{mode}"] = max(g.get(f"step_{mode}", 0.0), step)
            g[f"wrel_{mode}"] = max(g.get(f"wrel_{mode}", 0.0), d / max(step, orig["lr"]))
    # The original's whole train op (informational): which step's learning rate it used.
    num = sum(
        float(np.abs(orig["post"]["train_op"][n].astype(np.float64) - proj["w0"][n]).sum())
        for n in names
    )
    den = sum(
        float(np.abs(orig["post"]["fresh"][n].astype(np.float64) - proj["w0"][n]).sum())
        for n in names
    )
    ratio = num / den if den else float("nan")
    diff_full = max(
        float(
            np.max(
                np.abs(orig["post"]["train_op"][n].astype(np.float64) - proj["post"]["fresh"][n])
            )
        )
        for n in names
    )
    race[tag] = {
        "lr_k": orig["lr"],
        "effective_lr_train_op": ratio * orig["lr"],
        "lr_k_plus_1": orig["lr_next"],
        "max_abs_diff_project_vs_full_train_op": diff_full,
    }
    return groups


race = {}


def print_report(rep, all_groups, meta):
    log("\n== scalar / tensor checks (max abs diff; rel = diff / max|original|) ==")
    log(f"{'check':58s} {'max|diff|':>10s} {'max|ref|':>10s} {'rel/#bad':>10s}  ok")
    for label, diff, scale, rel, ok in rep.rows:
        rel_s = f"{rel:10d}" if isinstance(rel, int) else f"{rel:10.2e}"
        log(f"{label:58s} {diff:10.2e} {scale:10.2e} {rel_s}  {'ok' if ok else 'FAIL'}")
    for tag, groups in all_groups.items():
        log(f"\n== {tag}: gradients of the total loss and weights after one step, per group ==")
        log(
            f"{'group':26s} {'vars':>4s} {'grad diff':>10s} {'max|grad|':>10s} {'max rel':>9s} "
            f"{'w fresh':>9s} {'upd rel':>8s} {'w rndslot':>9s} {'upd rel':>8s}"
        )
        for name in sorted(groups):
            g = groups[name]
            log(
                f"{name:26s} {g['n']:4d} {g['grad_diff']:10.2e} {g['grad_scale']:10.2e} "
                f"{g['grad_rel']:9.1e} {g['w_fresh']:9.1e} {g['wrel_fresh']:8.1e} "
                f"{g['w_random_slots']:9.1e} {g['wrel_random_slots']:8.1e}"
            )
    log(
        "\n(per group, max over its variables: 'grad diff' max|project - original| of the "
        "gradient, 'max rel' that over the variable's max|gradient| (a key bias: its layer's key "
        "kernel's); 'w' max|project - original| of the weights after one step from fresh Adam "
        "slots / from random (identical) slots, 'upd rel' that over max(the variable's max|update|, lr))"
    )
    for tag, r in race.items():
        log(
            f"{tag}: original create_optimizer train op (update + global_step increment in one "
            f"tf.group): effective lr {r['effective_lr_train_op']:.6g} vs lr(step {OPT_STEP}) "
            f"{r['lr_k']:.6g}, lr(step {OPT_STEP + 1}) {r['lr_k_plus_1']:.6g}; project (lr(step "
            f"{OPT_STEP})) vs that train op: max|diff| {r['max_abs_diff_project_vs_full_train_op']:.2e} "
            "(informational, not gated)"
        )
    for k, v in meta.items():
        log(f"{k}: {v}")


# ============================================================================ main
def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--project", default=REPO_ROOT,
                   help="electra_tf checkout to import (default: this repository)")  # fmt: skip
    p.add_argument(
        "--mirror", default=DEFAULT_MIRROR, help="bare git dir of google-research/electra"
    )
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--rtol", type=float, default=1e-5, help="losses, logits, gradients")
    p.add_argument("--step-rtol", type=float, default=1e-3,
                   help="post-step weights, relative to the variable's max |update|")  # fmt: skip
    p.add_argument("--weight-std", type=float, default=0.2)
    p.add_argument("--slot-scale", type=float, default=2e-3, help="random Adam slot magnitude")
    p.add_argument("--max-seed-scan", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--scenario", action="append",
        help="run only these (" + ", ".join(sc["name"] for sc in SCENARIOS) + ")",
    )  # fmt: skip
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--keep-tmp", action="store_true")
    p.add_argument("--gpu", action="store_true", help="do not hide GPUs (TF32 disabled)")
    p.add_argument("--dense", choices=["auto", "fallback"], default="auto",
                   help="tf.layers.dense: tf_keras legacy layers (auto) or the get_variable shim")  # fmt: skip
    args = p.parse_args(argv)

    project = os.path.abspath(args.project)
    if project not in sys.path:
        sys.path.insert(0, project)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not args.gpu:
        # CPU float32 on both sides (a GPU's TF32 matmuls alone would exceed 1e-5).
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    warnings.filterwarnings("ignore", message=r".*tf\.layers\.dense.* is deprecated")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    import electra_tf

    if not os.path.abspath(electra_tf.__file__).startswith(project):
        raise SystemExit(f"ERROR: electra_tf imported from {electra_tf.__file__}, not {project}")

    tmp = tempfile.mkdtemp(prefix="electra_parity_")
    try:
        orig_dir = os.path.join(tmp, "electra_original")
        commit = extract_original(args.mirror, args.rev, orig_dir)
        shims = install_shims(tf, args.dense)
        orig = import_original(orig_dir)
        batch = make_batch(np)
        rep = Report(args.rtol)
        all_groups = {}
        meta = {
            "original": f"google-research/electra {commit} (extracted to {orig_dir})",
            "project": f"{project} (git {_git_head(project)})",
            "tensorflow": tf.__version__,
        }
        scenarios = [s for s in SCENARIOS if not args.scenario or s["name"] in args.scenario]
        for scen in scenarios:
            workdir = os.path.join(tmp, scen["name"])
            os.makedirs(workdir)
            write_vocab(os.path.join(workdir, "vocab.txt"))
            log(f"== scenario {scen['name']}: {scen['what']}")
            proj = project_phase(scen, batch, workdir, args, np, tf)
            proj["_input_mask"] = batch["input_mask"]
            log(
                f"   project: seed {proj['seed']}, loss {float(proj['loss']):.6f}; duplicated "
                f"positions (batch, slot, slot, pos): {proj['dup']}; with different samples "
                f"(..., ids): {proj['dup_diff']}"
            )
            orig_res = original_phase(scen, batch, proj, orig, workdir, args, np, tf)
            log(
                f"   original: loss {float(orig_res['total_loss']):.6f}, global grad norm "
                f"{orig_res['global_norm']:.3f} (clip 1.0), lr {orig_res['lr']:.6g}"
            )
            all_groups[scen["name"]] = compare(scen, proj, orig_res, rep, args, np)
            meta[f"{scen['name']} masked positions"] = proj["masked_lm_positions"].tolist()
            meta[f"{scen['name']} masked_lm_weights"] = (
                proj["masked_lm_weights"].astype(int).tolist()
            )
            meta[f"{scen['name']} sampled ids"] = proj["sampled_ids"].tolist()
            meta[f"{scen['name']} disc labels (sum per seq)"] = proj["disc_labels"].sum(-1).tolist()
            meta[f"{scen['name']} global grad norm (original)"] = round(orig_res["global_norm"], 4)
        meta["shims"] = shims
        print_report(rep, all_groups, meta)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(
                    {"rows": rep.rows, "groups": all_groups, "per_var": per_var, "race": race, "failures": rep.failures, "meta": meta},
                    f, indent=1, default=str,
                )  # fmt: skip
    finally:
        if args.keep_tmp:
            log(f"temp dir kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if rep.failures:
        log(f"\nPARITY FAILED: {len(rep.failures)} difference(s) beyond tolerance:")
        for f in rep.failures[:60]:
            log(f"  - {f}")
        if len(rep.failures) > 60:
            log(f"  ... and {len(rep.failures) - 60} more")
        return 1
    log("\nPARITY OK: every compared quantity is within tolerance.")
    return 0


def _git_head(path):
    try:
        return (
            subprocess.run(
                ["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
            or "?"
        )
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
