"""Console progress lines and TensorBoard scalars for a training or evaluation run.

The console line is the original's `ETAHook` (steps/s, elapsed, ETA, loss) plus the metrics the
pretrainer tracks and the real-token throughput (tokens where `input_mask` is 1, i.e. padding
excluded), which is what makes runs with different sequence packing comparable.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from typing import TextIO

import tensorflow as tf

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
        self, step: int, metrics: Mapping[str, float], tokens: float, learning_rate: float
    ) -> dict[str, float]:
        """Reports the period that ended at `step`; `tokens` = real tokens in that period."""
        now = self.clock()
        period = max(now - self._last_time, 1e-9)
        steps = step - self._last_step
        rates = {"steps_per_sec": steps / period, "tokens_per_sec": tokens / period}
        elapsed = now - self.start_time
        done = step - self._start_step
        eta = (self.total_steps - step) * elapsed / done if done > 0 else float("inf")
        self._last_time, self._last_step = now, step
        parts = [f"step {step}/{self.total_steps}"]
        parts += [f"{name} {value:.4f}" for name, value in console_metrics(metrics)]
        parts += [
            f"lr {learning_rate:.3g}",
            f"{rates['steps_per_sec']:.2f} steps/s",
            f"{rates['tokens_per_sec']:,.0f} tok/s",
            f"elapsed {format_duration(elapsed)}",
            f"ETA {format_duration(eta)}",
        ]
        print(" | ".join(parts), file=self.stream, flush=True)
        self._last_print = now
        scalars = {**metrics, **rates, "learning_rate": learning_rate}
        self.write_scalars(step, scalars)
        return scalars

    def heartbeat(self, step: int, tokens: float, every_seconds: float) -> bool:
        """Between two report lines: a short line (step, rates, ETA) when none came for
        `every_seconds`; `tokens` = real tokens since the last report. Nothing is reset."""
        now = self.clock()
        if now - self._last_print < every_seconds:
            return False
        self._last_print = now
        period = max(now - self._last_time, 1e-9)
        elapsed = now - self.start_time
        done = step - self._start_step
        eta = (self.total_steps - step) * elapsed / done if done > 0 else float("inf")
        parts = [
            f"step {step}/{self.total_steps}",
            f"{(step - self._last_step) / period:.2f} steps/s",
            f"{tokens / period:,.0f} tok/s",
            f"elapsed {format_duration(elapsed)}",
            f"ETA {format_duration(eta)}",
        ]
        print(" | ".join(parts), file=self.stream, flush=True)
        return True

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
