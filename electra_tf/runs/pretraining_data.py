"""The pre-training run's input: the distributed dataset, its restart on resume, and the data
errors of a compiled call (the data ran out, a corrupt record) as one-line messages."""

from __future__ import annotations

from typing import Any, TextIO

import tensorflow as tf

from electra_tf.checkpoints.training_state import TrainingCheckpoints
from electra_tf.config import ResolvedPretrainingConfig
from electra_tf.data.pretraining_input import InputDataError, locate_corrupt_record
from electra_tf.runs.strategy import WorkerLostError


def make_dataset(
    config: ResolvedPretrainingConfig,
    strategy: tf.distribute.Strategy,
    file_pattern: str,
    global_batch_size: int,
    is_training: bool,
    start_record: int = 0,
) -> Any:
    """The pre-training input, batched per replica when distributed: the same global batches
    whatever the strategy (`pretraining_dataset`), from record `start_record` of the stream."""
    from electra_tf.data.pretraining_input import pretraining_dataset

    def dataset_fn(context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        batch = global_batch_size
        if context is not None:
            batch = context.get_per_replica_batch_size(global_batch_size)
        return pretraining_dataset(
            file_pattern,
            batch,
            config.max_seq_length,
            is_training=is_training,
            seed=config.seed,
            input_context=context,
            start_record=start_record,
        )

    if strategy.num_replicas_in_sync == 1 and not isinstance(
        strategy, tf.distribute.TPUStrategy | tf.distribute.MultiWorkerMirroredStrategy
    ):
        return dataset_fn()
    return strategy.distribute_datasets_from_function(dataset_fn)


def resumed_input(
    config: ResolvedPretrainingConfig,
    strategy: tf.distribute.Strategy,
    pattern: str,
    optimizer: Any,
    stream: TextIO,
) -> Any:
    """The input stream at the position of the optimizer's step: what an uninterrupted run
    reads next (the stream is a function of the seed; records before the position are read,
    not parsed)."""
    step = int(optimizer.iterations.numpy())
    start = step * config.train_batch_size  # every step consumes one global batch
    iterator = iter(make_dataset(config, strategy, pattern, config.train_batch_size, True, start))
    print(f"Input resumed at step {step}: record {start} of the stream", file=stream)
    return iterator


def run_steps(
    train_steps: Any,
    iterator: Any,
    num_steps: int,
    config: ResolvedPretrainingConfig,
    checkpoints: TrainingCheckpoints,
    optimizer: Any,
    saved_step: int,
    files: list[str],
) -> int:
    """One call of the compiled loop: the steps this worker ran, or a one-line error naming the
    data (after saving the steps reached before a corrupt record)."""
    try:
        return int(train_steps(iterator, tf.constant(num_steps)))
    except tf.errors.OutOfRangeError as e:
        raise RuntimeError(
            f"{config.resolved_pretrain_tfrecords()}: the training data ran out"
        ) from e
    except tf.errors.DataLossError as e:
        saved = save_reached(checkpoints, optimizer, saved_step)
        raise InputDataError(f"{locate_corrupt_record(files) or e.message}; {saved}") from None
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as e:
        # A peer worker died or stopped answering: TensorFlow's health check aborted the
        # collectives. Nothing can be saved (saving is collective); the last checkpoint stands.
        latest = checkpoints.latest()
        kept = f"the last checkpoint is {latest}" if latest else "no checkpoint was written yet"
        raise WorkerLostError(
            f"lost contact with another worker ({type(e).__name__}); {kept}. Its own output "
            "says why it stopped; then start every worker again with the same command to "
            "resume from it"
        ) from None


def save_reached(checkpoints: TrainingCheckpoints, optimizer: Any, saved_step: int) -> str:
    """Saves the step reached before an input error; says what was kept."""
    step = int(optimizer.iterations.numpy())
    if step == saved_step:
        return f"the last checkpoint is at step {step}"
    try:
        return f"saved {checkpoints.save(step)} (step {step}) first"
    except Exception as e:  # the run is failing already: report, do not mask the input error
        return f"could not save step {step} ({type(e).__name__})"
