"""The curve check's runs, one side and one seed per process: the fixed evaluation set, the
original's training graph (`run_original`) and the project's training run (`run_project`),
each scored on that set every --every steps and recorded as it goes (`Recorder`).
"""

from __future__ import annotations

import json
import os
import time

from tools.original_parity.curves_metrics import METRICS, ORIGINAL_EVAL_KEYS, eval_metrics
from tools.original_parity.original_side import import_original, install_shims
from tools.original_parity.project_side import build_optimizer
from tools.original_parity.runtime import (
    Proxy,
    extract_original,
    log,
    patched,
    session_config,
    setup_tf,
)

EVAL_BATCH, EVAL_BATCHES = 16, 4
EVAL_SEED = 4321
MUTATIONS = {
    "mask_rate_010": "dynamic masking predicts 10% of the tokens instead of 15% (same slots N)",
    "mask_token_always": "every chosen position shows [MASK] (probability 1.0 instead of 0.85)",
    "greedy_sampling": "the generator's samples are its argmax: no Gumbel noise",
}


def max_predictions(hp: dict) -> int:
    """The original's max_predictions_per_seq (configure_pretraining)."""
    return int((hp["mask_prob"] + 0.005) * hp["max_seq_length"])


# ============================================================================ mutations
def apply_mutation(name: str) -> None:
    """Monkeypatches the project in this process (MUTATIONS here, or mutations.py's)."""
    if name not in MUTATIONS:
        from tools.original_parity import mutations

        mutations.apply(name)
        return
    import tensorflow as tf

    from electra_tf.pretraining import pretrainer

    if name in ("mask_rate_010", "mask_token_always"):
        real = pretrainer.mask_inputs

        def mutated(input_ids, input_mask, max_predictions, mask_prob, seed, **kw):
            if name == "mask_rate_010":
                mask_prob = 0.10
            else:
                kw["mask_token_prob"] = 1.0
            return real(input_ids, input_mask, max_predictions, mask_prob, seed, **kw)

        pretrainer.mask_inputs = mutated
    elif name == "greedy_sampling":

        def greedy(logits, seed, temperature=1.0, disallow_ids=None, uniform=None, start=0):
            del seed, uniform, start
            return tf.argmax(tf.stop_gradient(tf.cast(logits, tf.float32)), -1, tf.int32)

        pretrainer.gumbel_sample = greedy


# ============================================================================ eval set
def eval_noise(np, hp: dict, i: int):
    """The fixed uniform draws of the generator's Gumbel noise for eval batch `i`: float32
    [EVAL_BATCH, N, vocab], made anew at each use (no 300 MB kept per run)."""
    shape = [EVAL_BATCH, max_predictions(hp), hp["vocab_size"]]
    return np.random.default_rng(EVAL_SEED + i).random(shape, dtype=np.float32)


def prepare_eval_set(args, hp: dict, out: str) -> None:
    """Child: the first EVAL_BATCHES x EVAL_BATCH records of the eval TFRecords (in order, as
    the original's parser reads them), masked once by the original's `pretrain_helpers.mask`
    (graph seed EVAL_SEED); written to `out` (npz)."""
    np, tf = setup_tf(args.threads)
    import tensorflow.compat.v1 as v1

    orig = _original_code(args, tf)
    config = orig.configure_pretraining.PretrainingConfig("curves", args.data_dir, **hp)
    files = sorted(v1.io.gfile.glob(os.path.join(args.data_dir, "eval_tfrecords", "*.tfrecord*")))
    count = EVAL_BATCH * EVAL_BATCHES
    graph = v1.Graph()
    with graph.as_default():
        v1.set_random_seed(EVAL_SEED)
        name_to_features = {
            k: v1.io.FixedLenFeature([config.max_seq_length], v1.int64)
            for k in ("input_ids", "input_mask", "segment_ids")
        }
        d = v1.data.TFRecordDataset(files).take(count)
        # The original's own record decoder (int64 -> int32).
        d = d.map(lambda r: orig.pretrain_data._decode_record(r, name_to_features))
        features = v1.data.make_one_shot_iterator(
            d.batch(EVAL_BATCH, drop_remainder=True)
        ).get_next()
        masked = orig.pretrain_helpers.mask(
            config, orig.pretrain_data.features_to_inputs(features), config.mask_prob
        )
        fetch = {k: features[k] for k in features}
        fetch.update({
            "masked_input_ids": masked.input_ids, "masked_lm_positions": masked.masked_lm_positions,
            "masked_lm_ids": masked.masked_lm_ids, "masked_lm_weights": masked.masked_lm_weights,
        })  # fmt: skip
    with v1.Session(graph=graph) as sess:
        parts = []
        for _ in range(EVAL_BATCHES):
            try:
                parts.append(sess.run(fetch))
            except v1.errors.OutOfRangeError:
                raise SystemExit(
                    f"ERROR: {args.data_dir}/eval_tfrecords has fewer than {count} records"
                ) from None
    np.savez(out, **{k: np.stack([p[k] for p in parts]) for k in fetch})


# ============================================================================ original side
def _original_code(args, tf):
    tmp = os.path.join(args.workdir, f"electra_original_{args.child}_{args.seed}")
    commit = extract_original(args.mirror, args.rev, tmp)
    install_shims(tf)
    orig = import_original(tmp)
    orig.commit = commit
    return orig


class OriginalEval:
    """The original's model at is_training=False in its own graph, on the fixed eval set:
    `mask` returns the fixed masking, `sample_from_softmax` draws its Gumbel noise from the
    fixed uniforms; its own metric_fn runs beside (`own_metrics`)."""

    def __init__(self, orig, config, eval_set, noise, threads: int):
        import tensorflow.compat.v1 as v1

        ph, pd, rp = orig.pretrain_helpers, orig.pretrain_data, orig.run_pretraining
        B, S, N = EVAL_BATCH, config.max_seq_length, config.max_predictions_per_seq
        self.eval_set, self.noise = eval_set, noise
        self.graph = v1.Graph()
        with self.graph.as_default():
            self.features = {
                k: v1.placeholder(v1.int32, [B, S], k)
                for k in ("input_ids", "input_mask", "segment_ids")
            }
            self.fixed = {
                "masked_input_ids": v1.placeholder(v1.int32, [B, S]),
                "masked_lm_positions": v1.placeholder(v1.int32, [B, N]),
                "masked_lm_ids": v1.placeholder(v1.int32, [B, N]),
                "masked_lm_weights": v1.placeholder(v1.float32, [B, N]),
            }
            self.uniform = v1.placeholder(v1.float32, [B, N, config.vocab_size])

            def fixed_mask(config_, inputs, mask_prob, *a, **k):
                f = self.fixed
                return pd.get_updated_inputs(
                    inputs, input_ids=f["masked_input_ids"],
                    masked_lm_positions=f["masked_lm_positions"],
                    masked_lm_ids=f["masked_lm_ids"], masked_lm_weights=f["masked_lm_weights"],
                )  # fmt: skip

            def fixed_uniform(shape, *a, **k):
                assert list(shape) == self.uniform.shape.as_list(), shape
                return self.uniform

            random = Proxy(v1.random, uniform=fixed_uniform)
            with (
                patched(ph, "mask", fixed_mask),
                patched(ph, "tf", Proxy(v1, random=random)),
            ):
                model = rp.PretrainingModel(config, dict(self.features), False)
            metric_fn, values = model.eval_metrics
            if len(values) != len(ORIGINAL_EVAL_KEYS):
                raise SystemExit(f"ERROR: the original's eval_fn_inputs has {len(values)} entries")
            self.fetch = dict(zip(ORIGINAL_EVAL_KEYS, values, strict=True))
            self.fetch["total_loss"] = model.total_loss
            own = metric_fn(*values)
            self.own_values = {k: v[0] for k, v in own.items()}
            self.fetch["_updates"] = [v[1] for v in own.values()]
            self.reset = v1.local_variables_initializer()
            self.saver = v1.train.Saver(var_list={v.op.name: v for v in v1.trainable_variables()})
        self.sess = v1.Session(graph=self.graph, config=session_config(threads))

    def run(self, prefix: str) -> tuple[dict, dict]:
        with self.graph.as_default():
            self.saver.restore(self.sess, prefix)
        self.sess.run(self.reset)
        batches = []
        for i in range(EVAL_BATCHES):
            feed = {self.features[k]: self.eval_set[k][i] for k in self.features}
            feed.update({self.fixed[k]: self.eval_set[k][i] for k in self.fixed})
            feed[self.uniform] = self.noise(i)
            batches.append(self.sess.run(self.fetch, feed))
        return eval_metrics(batches), {
            k: float(v) for k, v in self.sess.run(self.own_values).items()
        }


def run_original(args, hp: dict) -> dict:
    """Child: the original's training graph for --steps, evaluated every --every steps."""
    np, tf = setup_tf(args.threads)
    import tensorflow.compat.v1 as v1

    orig = _original_code(args, tf)
    rp, opt = orig.run_pretraining, orig.optimization
    config = orig.configure_pretraining.PretrainingConfig("curves", args.data_dir, **hp)
    eval_set = dict(np.load(args.eval_set))
    evaluator = OriginalEval(orig, config, eval_set, lambda i: eval_noise(np, hp, i), args.threads)
    graph = v1.Graph()
    with graph.as_default():
        v1.set_random_seed(args.seed)
        # As train_one_step / TPUEstimator.train feed it: the original's input_fn.
        input_fn = orig.pretrain_data.get_input_fn(config, True)
        dataset = input_fn({"batch_size": config.train_batch_size})
        features = v1.data.make_one_shot_iterator(dataset).get_next()
        model = rp.PretrainingModel(config, features, True)
        # model_fn_builder's TRAIN branch.
        train_op = opt.create_optimizer(
            model.total_loss, config.learning_rate, config.num_train_steps,
            weight_decay_rate=config.weight_decay_rate, use_tpu=config.use_tpu,
            warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
        )  # fmt: skip
        saver = v1.train.Saver(var_list={v.op.name: v for v in v1.trainable_variables()})
        init = v1.global_variables_initializer()
    sess = v1.Session(graph=graph, config=session_config(args.threads))
    sess.run(init)
    prefix = os.path.join(args.workdir, f"original_seed{args.seed}", "model.ckpt")
    record = _Recorder(args, "original")
    losses = []
    for step in range(args.steps + 1):
        if step % args.every == 0 or step == args.steps:
            with graph.as_default():
                saver.save(sess, prefix, write_meta_graph=False)
            mine, own = evaluator.run(prefix)
            for key in METRICS + ("masked_lm_loss", "disc_loss"):
                ref = own.get("loss" if key == "total_loss" else key)
                if ref is not None and not abs(ref - mine[key]) <= 1e-4 * max(1.0, abs(ref)):
                    raise SystemExit(
                        f"ERROR: eval_metrics' {key} {mine[key]} != the original's metric_fn {ref}"
                    )
            mine["train_loss"] = float(np.mean(losses)) if losses else float("nan")
            losses = []
            record.point(step, mine)
        if step == args.steps:
            break
        _, loss = sess.run([train_op, model.total_loss])
        losses.append(loss)
    return record.done()


# ============================================================================ project side
def _project_training(args, hp: dict, tf):
    """The project's training run pieces on --data-dir: its model, compiled train function and
    data iterator, seeded with --seed."""
    import tf_keras as keras

    import electra_tf
    from electra_tf.runs.pretraining_data import make_dataset
    from electra_tf.runs.pretraining_model import build_model, make_train_function

    if args.mutation:
        apply_mutation(args.mutation)
    keras.utils.set_random_seed(args.seed)
    precision = args.project_precision
    config = electra_tf.pretraining_config(
        "curves", args.data_dir,
        hparams=dict(hp, seed=args.seed, precision=precision, jit_compile=False),
    )  # fmt: skip
    keras.mixed_precision.set_global_policy(precision)  # as the training run sets it
    model = build_model(config)
    optimizer = build_optimizer(config, model)
    model.compile(optimizer=optimizer)
    strategy = tf.distribute.get_strategy()
    train_steps = make_train_function(model, strategy, jit=False)
    dataset = make_dataset(
        config, strategy, config.resolved_pretrain_tfrecords(), config.train_batch_size, True
    )
    return config, model, train_steps, iter(dataset)


def _project_evaluator(config, model, tf):
    """The project's model at training=False on a fixed eval batch (its masking, its Gumbel
    uniforms), returning the original's eval_fn_inputs; and the input specs."""
    B, S, N = EVAL_BATCH, config.max_seq_length, config.max_predictions_per_seq
    spec = {k: tf.TensorSpec([B, S], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    mspec = {
        "masked_input_ids": tf.TensorSpec([B, S], tf.int32),
        "masked_lm_positions": tf.TensorSpec([B, N], tf.int32),
        "masked_lm_ids": tf.TensorSpec([B, N], tf.int32),
        "masked_lm_weights": tf.TensorSpec([B, N], tf.float32),
    }

    @tf.function(input_signature=[spec, mspec, tf.TensorSpec([B, N, config.vocab_size])])
    def evaluate(inputs, masked, uniform):
        draws = {"masked": masked, "sample_seed": tf.zeros([2], tf.int64), "uniform": uniform}
        out = model.forward(inputs, False, draws=draws)
        # float32 for the metrics, whatever the --project-precision computed in.
        out = {k: tf.cast(v, tf.float32) if v.dtype.is_floating else v for k, v in out.items()}
        mask = tf.cast(inputs["input_mask"], tf.float32)
        probs = tf.sigmoid(out["disc_logits"])
        return {
            "total_loss": out["loss"],
            "masked_lm_preds": tf.argmax(out["mlm_logits"], -1, output_type=tf.int32),
            "mlm_loss": out["masked_lm_losses"],
            "disc_loss": tf.reduce_sum(out["disc_losses"] * mask, -1) / (1e-6 + tf.reduce_sum(mask, -1)),
            "disc_labels": out["disc_labels"],
            "disc_probs": probs,
            "disc_preds": tf.cast(out["disc_logits"] > 0, tf.int32),
            "sampled_tokids": out["sampled_ids"],
        }  # fmt: skip

    return evaluate, spec, mspec


def run_project(args, hp: dict) -> dict:
    """Child: the project's training run pieces for --steps, evaluated every --every steps."""
    np, tf = setup_tf(args.threads)
    config, model, train_steps, iterator = _project_training(args, hp, tf)
    eval_set = dict(np.load(args.eval_set))
    evaluate, spec, mspec = _project_evaluator(config, model, tf)
    record = _Recorder(args, "project")
    step = 0
    while True:
        batches = []
        for i in range(EVAL_BATCHES):
            inputs = {k: tf.constant(eval_set[k][i]) for k in spec}
            masked = {k: tf.constant(eval_set[k][i]) for k in mspec}
            res = {
                k: v.numpy()
                for k, v in evaluate(inputs, masked, tf.constant(eval_noise(np, hp, i))).items()
            }
            res.update(
                input_ids=eval_set["masked_input_ids"][i], input_mask=eval_set["input_mask"][i],
                masked_lm_ids=eval_set["masked_lm_ids"][i],
                masked_lm_weights=eval_set["masked_lm_weights"][i],
            )  # fmt: skip
            batches.append(res)
        values = eval_metrics(batches)
        loss = {m.name: float(m.result()) for m in model.metrics}.get("loss", float("nan"))
        values["train_loss"] = loss if step else float("nan")
        record.point(step, values)
        if step >= args.steps:
            break
        for m in model.metrics:
            m.reset_state()
        n = min(args.every, args.steps - step)
        train_steps(iterator, tf.constant(n))
        step += n
    return record.done()


class _Recorder:
    def __init__(self, args, side: str):
        self.args, self.side = args, side
        self.steps, self.values = [], {}
        self.t0 = time.time()
        self.cpu0 = time.process_time()

    def point(self, step: int, values: dict) -> None:
        self.steps.append(step)
        for k, v in values.items():
            self.values.setdefault(k, []).append(v)
        log(
            f"[{self.side} seed {self.args.seed}] step {step:5d} "
            + " ".join(f"{k} {values[k]:.4f}" for k in METRICS)
            + f" ({time.time() - self.t0:.0f} s)"
        )
        # The curve so far, after every point: a run stopped early still leaves it
        # (`--report-only` compares the steps every run has reached).
        self._write(complete=False)

    def _write(self, complete: bool) -> dict:
        result = {
            "side": self.side, "seed": self.args.seed, "steps": self.steps, "values": self.values,
            "seconds": round(time.time() - self.t0, 1),
            "cpu_seconds": round(time.process_time() - self.cpu0, 1),
            "mutation": self.args.mutation if self.side == "project" else None,
            "complete": complete,
        }  # fmt: skip
        partial = self.args.out + ".part"
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(partial, self.args.out)
        return result

    def done(self) -> dict:
        return self._write(complete=True)
