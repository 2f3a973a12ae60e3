"""Console progress lines and TensorBoard scalars for a training or evaluation run.

The console line is the original's `ETAHook` (steps/s, elapsed, ETA, loss) plus the metrics the
pretrainer tracks and the real-token throughput (tokens where `input_mask` is 1, i.e. padding
excluded), which is what makes runs with different sequence packing comparable. Fine-tuning's
line is the same one (`FitProgress`, for Keras' `fit`), with examples/s beside tok/s.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import tensorflow as tf
import tf_keras as keras

TENSORBOARD_DIR = "tensorboard"  # <model_dir>/tensorboard/{train,eval}

# Metrics on the console line, in this order (TensorBoard gets every metric).
CONSOLE_METRICS = (
    "loss",
    "masked_lm_accuracy",
    "disc_accuracy",
    "disc_auc",
    "replace_mlm_accuracy",  # objective_variant "replace_mlm"
    "all_tokens_mlm_accuracy",  # objective_variant "all_tokens_mlm"
)


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def console_metrics(metrics: Mapping[str, float]) -> list[tuple[str, float]]:
    shown = [(k, metrics[k]) for k in CONSOLE_METRICS if k in metrics]
    # A model without these names (another objective) still gets a useful line.
    return shown or sorted((k, v) for k, v in metrics.items() if k != "learning_rate")


class ProgressReporter:
    """Writes one console line and one set of TensorBoard scalars per reporting period.

    Args:
      total_steps: the step training stops at (for the ETA).
      start_step: the step this process started from (the rates ignore earlier runs).
      summary_dir: TensorBoard event directory; None disables TensorBoard.
      stream: console stream (stdout by default).
      clock: monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        total_steps: int,
        start_step: int,
        summary_dir: str | None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total_steps = total_steps
        self.stream = stream or sys.stdout
        self.clock = clock
        self.start_time = clock()
        self._last_time = self.start_time
        self._last_step = start_step
        self._start_step = start_step
        self._last_print = self.start_time
        self.writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None

    def report(
        self,
        step: int,
        metrics: Mapping[str, float],
        tokens: float,
        learning_rate: float,
        examples: float | None = None,
    ) -> dict[str, float]:
        """Reports the period that ended at `step`; `tokens` = real tokens in that period,
        `examples` (shown where given) the examples in it."""
        now = self.clock()
        rates, timing = self._since_last_report(now, step, tokens, examples)
        self._last_time, self._last_step = now, step
        parts = [f"step {step}/{self.total_steps}"]
        parts += [f"{name} {value:.4f}" for name, value in console_metrics(metrics)]
        parts += [f"lr {learning_rate:.3g}", *_rate_parts(rates), *timing]
        print(" | ".join(parts), file=self.stream, flush=True)
        self._last_print = now
        scalars = {**metrics, **rates, "learning_rate": learning_rate}
        self.write_scalars(step, scalars)
        return scalars

    def heartbeat(
        self, step: int, tokens: float, every_seconds: float, examples: float | None = None
    ) -> bool:
        """Between two report lines: a short line (step, rates, ETA) when none came for
        `every_seconds`; `tokens` (`examples`, shown where given) since the last report.
        Nothing is reset."""
        now = self.clock()
        if now - self._last_print < every_seconds:
            return False
        self._last_print = now
        rates, timing = self._since_last_report(now, step, tokens, examples)
        parts = [f"step {step}/{self.total_steps}", *_rate_parts(rates), *timing]
        print(" | ".join(parts), file=self.stream, flush=True)
        return True

    def _since_last_report(
        self, now: float, step: int, tokens: float, examples: float | None
    ) -> tuple[dict[str, float], list[str]]:
        """The rates over the period since the last report line, and the elapsed / ETA parts."""
        period = max(now - self._last_time, 1e-9)
        rates = {
            "steps_per_sec": (step - self._last_step) / period,
            "tokens_per_sec": tokens / period,
        }
        if examples is not None:
            rates["examples_per_sec"] = examples / period
        elapsed = now - self.start_time
        done = step - self._start_step
        eta = (self.total_steps - step) * elapsed / done if done > 0 else float("inf")
        return rates, [f"elapsed {format_duration(elapsed)}", f"ETA {format_duration(eta)}"]

    def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        if self.writer is None:
            return
        with self.writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _rate_parts(rates: Mapping[str, float]) -> list[str]:
    """steps/s, then ex/s where counted, then tok/s."""
    parts = [f"{rates['steps_per_sec']:.2f} steps/s"]
    if "examples_per_sec" in rates:
        parts.append(f"{rates['examples_per_sec']:,.1f} ex/s")
    return [*parts, f"{rates['tokens_per_sec']:,.0f} tok/s"]


class FitProgress(keras.callbacks.Callback):
    """A `ProgressReporter`'s lines for Keras' `fit` (the fine-tuning run): every `every` steps
    and at the last, the period's mean of the model's metrics (reset after each line, as the
    pre-training loop resets its), the learning rate, steps/s, examples/s (`batch_size` per
    step), tok/s (the train step's `tokens`, real tokens), elapsed and ETA; between two lines
    a heartbeat after `heartbeat_seconds` without one. Closes the reporter when `fit` ends.

    Args:
      reporter: the reporter (its total steps, start step, TensorBoard dir and stream).
      every: steps between report lines.
      batch_size: examples per step.
      learning_rate: the optimizer's current learning rate, asked at each line.
      heartbeat_seconds: the longest silence between two lines (the pre-training run's CPU
        heartbeat, `cpu_calls.HEARTBEAT_SECONDS`, in the fine-tuning run).
      start_step: the step `fit` starts from (a resumed trial's).
    """

    def __init__(
        self,
        reporter: ProgressReporter,
        every: int,
        batch_size: int,
        learning_rate: Callable[[], float],
        heartbeat_seconds: float,
        start_step: int = 0,
    ):
        super().__init__()
        self.reporter, self.every, self.batch_size = reporter, max(1, every), batch_size
        self.learning_rate, self.heartbeat_seconds = learning_rate, heartbeat_seconds
        self.step = start_step  # `fit` counts from 0; a resumed trial from its checkpoint's
        self.tokens = self.examples = 0

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1
        self.tokens += int((logs or {}).get("tokens", 0))
        self.examples += self.batch_size
        if self.step % self.every and self.step != self.reporter.total_steps:
            self.reporter.heartbeat(
                self.step, self.tokens, self.heartbeat_seconds, examples=self.examples
            )
            return
        metrics = {m.name: float(m.result()) for m in self.model.metrics}
        self.reporter.report(
            self.step, metrics, self.tokens, self.learning_rate(), examples=self.examples
        )
        for metric in self.model.metrics:
            metric.reset_state()
        self.tokens = self.examples = 0

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.reporter.close()
