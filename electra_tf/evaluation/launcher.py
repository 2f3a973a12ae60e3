"""How `compare_objectives` runs its steps: as processes, two at a time pinned to a
core each, with progress lines; or (for tests) one by one inside the calling process.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from electra_tf.evaluation import sst2_transfer

# The folder that holds the electra_tf package: the runs import it from there.
ROOT = sst2_transfer.ROOT


def log(message: str) -> None:
    print(f"[compare] {message}", flush=True)


def clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


# ---------------------------------------------------------------------- launching
@dataclass
class Job:
    """One process of the comparison: `argv` follows the interpreter (`-m module ...`); its
    output goes to `log_path`."""

    name: str
    argv: list[str]
    log_path: str
    returncode: int | None = None
    seconds: float = 0.0


class Launcher:
    """Starts jobs as processes, pinned to a core each when `cpus` is given, or (in_process)
    runs them one by one in this process."""

    def __init__(
        self, cpus: list[int] | None, threads: int | None, in_process: bool, progress_s: float
    ):
        self.cpus, self.in_process, self.progress_s = cpus, in_process, progress_s
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        self.env["PYTHONUNBUFFERED"] = "1"
        # A run whose launcher dies saves and stops (electra_tf/cli/pretrain.py).
        self.env["ELECTRA_STOP_WITH_PARENT"] = "1"
        if threads:
            for key in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS"):
                self.env[key] = str(threads)
            self.env["TF_NUM_INTEROP_THREADS"] = "1"

    def run_group(self, jobs: list[Job], budget_s: float | None, eta_after_s: float) -> None:
        """Runs `jobs` together (one core each) and waits for all; fills returncode/seconds.
        Progress lines every `progress_s` with each run's step and the ETA of the phase."""
        if self.in_process:
            for job in jobs:
                self._run_in_process(job)
            return
        procs, threads = [], []
        started = time.monotonic()
        for i, job in enumerate(jobs):
            os.makedirs(os.path.dirname(job.log_path), exist_ok=True)
            command = [sys.executable, *job.argv]
            if self.cpus:
                command = sst2_transfer.pinned(command, self.cpus[i % len(self.cpus)])
            with open(job.log_path, "a", encoding="utf-8") as logf:
                logf.write(f"$ {shlex.join(command)}\n")
                logf.flush()
                # Its own session: Ctrl-C reaches only this command, which then asks each run
                # once to save and stop (a second SIGINT would abort a run without saving).
                proc = subprocess.Popen(
                    command, stdout=logf, stderr=subprocess.STDOUT, env=self.env,
                    start_new_session=True,
                )  # fmt: skip
            procs.append(proc)
            thread = threading.Thread(target=self._wait, args=(job, proc, time.monotonic()))
            thread.start()
            threads.append(thread)
        try:
            last = time.monotonic()
            while any(t.is_alive() for t in threads):
                time.sleep(0.2)
                if self.progress_s and time.monotonic() - last >= self.progress_s:
                    last = time.monotonic()
                    self._progress(jobs, time.monotonic() - started, budget_s, eta_after_s)
        except KeyboardInterrupt:
            log("stopping: every run saves a checkpoint, then stops (Ctrl-C again aborts them)")
            self._signal(procs, signal.SIGINT)
            try:
                for t in threads:
                    t.join()
            except KeyboardInterrupt:
                self._signal(procs, signal.SIGINT)  # the runs' second SIGINT: no save
                raise
        for t in threads:
            t.join()

    @staticmethod
    def _wait(job: Job, proc: subprocess.Popen, started: float) -> None:
        job.returncode = proc.wait()
        job.seconds = time.monotonic() - started

    @staticmethod
    def _signal(procs: list[subprocess.Popen], signum: int) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    def _progress(
        self, jobs: list[Job], elapsed: float, budget_s: float | None, eta_after_s: float
    ) -> None:
        parts = []
        for job in jobs:
            step = last_step_line(job.log_path)
            state = "done" if job.returncode is not None else (step or "running")
            parts.append(f"{job.name} {state}")
        line = f"{clock(elapsed)} | " + " | ".join(parts)
        if budget_s is not None:
            line += f" | pre-training ETA {clock(max(0.0, budget_s - elapsed) + eta_after_s)}"
        log(line)

    def _run_in_process(self, job: Job) -> None:
        """The job's `main(argv)` in this process, its output into the log."""
        if job.argv[0] != "-m":
            raise ValueError(f"{job.name}: not a module command: {job.argv}")
        module, args = importlib.import_module(job.argv[1]), job.argv[2:]
        args = [str(time.time()) if a == "{now}" else a for a in args]
        os.makedirs(os.path.dirname(job.log_path), exist_ok=True)
        started = time.monotonic()
        with open(job.log_path, "a", encoding="utf-8") as logf:
            with contextlib.redirect_stdout(logf), contextlib.redirect_stderr(logf):
                try:
                    job.returncode = module.main(args)
                except SystemExit as e:  # argparse errors
                    job.returncode = e.code if isinstance(e.code, int) else 2
        job.seconds = time.monotonic() - started


def last_step_line(log_path: str) -> str | None:
    """`step N/T` from the last progress line of a pre-training log."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            f.seek(max(0, os.path.getsize(log_path) - 4096))
            tail = f.read()
    except OSError:
        return None
    steps = re.findall(r"^step (\d+/\d+)", tail, re.M)
    return f"step {steps[-1]}" if steps else None


def log_tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def groups(items: Sequence[str], size: int) -> list[list[str]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def run_finetune_in_process(command: list[str]) -> tuple[int, str]:
    """`[python, -m, electra_tf.finetune, args...]` as a call of its main."""
    module = importlib.import_module(command[2])
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        code = module.main(command[3:])
    return code, buffer.getvalue()[-3000:]


class FinetuneCounter:
    """sst2_transfer's command runner, with a progress line and an ETA after each fine-tuning
    run. `total` counts the runs whose results are not cached yet (an upper bound: a row whose
    dev run is cached but not its sweep counts its dev run too). `jobs`: runs going at once
    (sst2_transfer's `--jobs`), which divides the time left."""

    def __init__(
        self, in_process: bool, sst_out: str, rows: list[str], lrs: list[str], jobs: int = 1
    ):
        self.in_process, self.jobs = in_process, jobs
        self.lock = threading.Lock()
        tags = [sst2_transfer.lr_tag(float(lr)) for lr in lrs]
        done = 0
        for row in rows:
            for tag in tags:
                results = os.path.join(sst_out, "val", "models", f"{row}_val_lr{tag}", "results")
                done += os.path.exists(os.path.join(results, "sst_results.json"))
            pattern = os.path.join(sst_out, "dev", "models", f"{row}_dev_lr*", "results", "*")
            done += bool(glob.glob(pattern))
        # sst2_transfer runs no validation sweep for a single lr.
        self.total = len(rows) * ((len(lrs) if len(lrs) > 1 else 0) + 1) - done
        self.count, self.seconds = 0, 0.0

    def __call__(self, command: list[str], env: dict[str, str]) -> tuple[int, str]:
        started = time.monotonic()
        if self.in_process:
            code, output = run_finetune_in_process(command)
        else:
            code, output = sst2_transfer.run_command(command, env)
        with self.lock:  # with --jobs, runs end in several threads
            self.count += 1
            self.seconds += time.monotonic() - started
            left = max(0, self.total - self.count)
            eta = left * self.seconds / self.count / self.jobs
            log(f"fine-tuning run {self.count} of <= {self.total} done; SST-2 ETA <= {clock(eta)}")
        return code, output
