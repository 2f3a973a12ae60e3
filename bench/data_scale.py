"""The data stage at scale: TFRecord builds of large synthetic corpora, measured from outside.

    python -m bench.data_scale --source-dir BOOKS --vocab-file vocab.txt \\
        --work-dir /big/disk/scale-data --runs 100:1,100:2,5000:2,owt1000:2

Each run is `SIZE:PROCESSES` (a corpus of SIZE MB in the `books` layout, built with
`data_prep/build_tfrecords.py`) or `owtSIZE:PROCESSES` (the OpenWebText layout, built with
`data_prep/build_openwebtext_tfrecords.py`). Missing corpora are generated under --work-dir
with `bench.scale_corpus` from the books of --source-dir (generation is not timed); each build
writes a fresh output folder under --work-dir, deleted after it is measured unless --keep.

Each build runs as its own command, as a user would run it; measured from outside:
- wall seconds, and CPU seconds (user + system of the command and all its worker processes,
  from `wait4`), so that figures taken on a loaded machine still compare: CPU seconds per MB
  and corpus tokens per CPU second do not move with load, wall time does;
- peak RSS of the whole process tree (parent and workers summed, polled every 0.2 s) and of
  its largest process: flat from 100 MB to 5 GB means the build streams.

`--stop-at 0.5 --signal KILL` stops each build when its progress line passes half the corpus,
reports what it left (files, processes still alive), then runs the same command again and
reports whether that one finished whole.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    raise SystemExit("run it from the repository root as: python -m bench.data_scale")

import argparse
import dataclasses
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import psutil

from bench.scale_corpus import MANIFEST

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PROGRESS = re.compile(r"([\d,.]+)/([\d,.]+) MB")


@dataclasses.dataclass
class Measurement:
    run: str
    corpus_mb: float = 0.0
    processes: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    tokens: int = 0
    examples: int = 0
    peak_tree_mib: float = 0.0
    peak_process_mib: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0
    returncode: int = 0
    note: str = ""

    @property
    def cpu_s_per_mb(self) -> float:
        return self.cpu_s / max(self.corpus_mb, 1e-9)

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.tokens / max(self.cpu_s, 1e-9)

    @property
    def mb_per_wall_s(self) -> float:
        return self.corpus_mb / max(self.wall_s, 1e-9)


def _text_mb(corpus: str) -> float:
    with open(os.path.join(corpus, MANIFEST)) as f:
        return json.load(f)["text_bytes"] / 1e6


def _corpus_size_mb(folder: str) -> float:
    total = 0
    for root, _, files in os.walk(folder):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total / 1e6


def ensure_corpus(args, size_mb: float, owt: bool) -> str:
    name = f"{'owt' if owt else 'corpus'}-{size_mb:g}mb"
    folder = os.path.join(args.work_dir, name)
    if os.path.exists(os.path.join(folder, MANIFEST)):
        return folder
    if os.path.isdir(folder):
        shutil.rmtree(folder)  # a generation that did not finish; only ever ours
    command = [sys.executable, "-m", "bench.scale_corpus", "--source-dir", args.source_dir]
    command += ["--out-dir", folder, "--size-mb", str(size_mb)]
    command += ["--layout", "openwebtext"] if owt else []
    print("generating:", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)
    return folder


def _poll_tree(proc: psutil.Process, peaks: dict, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            tree = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        rss = []
        for p in tree:
            try:
                rss.append(p.memory_info().rss)
            except psutil.NoSuchProcess:
                pass
        peaks["tree"] = max(peaks["tree"], sum(rss))
        peaks["process"] = max(peaks["process"], max(rss, default=0))
        peaks["pids"] = {p.pid for p in tree} | peaks["pids"]
        stop.wait(0.2)


def run_command(command, stop_at: float | None = None, stop_signal: int = signal.SIGKILL):
    """Runs `command`; returns (returncode, wall s, CPU s, peaks, stdout, stderr tail)."""
    start = time.perf_counter()
    popen = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peaks = {"tree": 0, "process": 0, "pids": set()}
    stop = threading.Event()
    poller = threading.Thread(target=_poll_tree, args=(psutil.Process(popen.pid), peaks, stop))
    poller.start()
    err_lines: list[str] = []

    def read_err():
        for line in popen.stderr:
            err_lines.append(line)
            match = _PROGRESS.search(line)
            if stop_at is not None and match:
                done, total = (float(g.replace(",", "")) for g in match.groups())
                if done >= stop_at * total and popen.poll() is None:
                    popen.send_signal(stop_signal)

    reader = threading.Thread(target=read_err)
    reader.start()
    out = popen.stdout.read()
    _, status, usage = os.wait4(popen.pid, 0)
    popen.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    stop.set()
    poller.join()
    reader.join()
    cpu = usage.ru_utime + usage.ru_stime
    return popen.returncode, wall, cpu, peaks, out, "".join(err_lines[-20:])


def _build_command(args, corpus: str, owt: bool, processes: int, output: str) -> list[str]:
    common = ["--num-processes", str(processes), "--num-out-files", str(args.num_out_files)]
    common += ["--max-seq-length", str(args.max_seq_length)]
    if owt:
        # The tool's layout: DATA_DIR/openwebtext/*, DATA_DIR/vocab.txt -> DATA_DIR/pretrain_tfrecords.
        os.makedirs(output)
        os.symlink(os.path.join(corpus, "openwebtext"), os.path.join(output, "openwebtext"))
        os.symlink(os.path.abspath(args.vocab_file), os.path.join(output, "vocab.txt"))
        return [sys.executable, "data_prep/build_openwebtext_tfrecords.py", "--data-dir", output]
    return [
        sys.executable, "data_prep/build_tfrecords.py", "--corpus-dir", corpus,
        "--vocab-file", args.vocab_file, "--output-dir", output, *common,
    ]  # fmt: skip


def _records_dir(output: str, owt: bool) -> str:
    return os.path.join(output, "pretrain_tfrecords") if owt else output


def _leftovers(folder: str) -> str:
    if not os.path.isdir(folder):
        return "no output folder"
    entries = []
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        size = _corpus_size_mb(path) if os.path.isdir(path) else os.path.getsize(path) / 1e6
        entries.append(f"{entry} ({size:,.0f} MB)")
    return ", ".join(entries) or "empty"


def measure(args, spec: str) -> list[Measurement]:
    size_text, processes_text = spec.split(":")
    owt = size_text.startswith("owt")
    size_mb = float(size_text[3:] if owt else size_text)
    processes = int(processes_text)
    corpus = ensure_corpus(args, size_mb, owt)
    output = os.path.join(args.work_dir, f"out-{spec.replace(':', '-p')}")
    if os.path.exists(output):
        raise SystemExit(f"error: {output} exists (a previous run's --keep); remove it first")
    command = _build_command(args, corpus, owt, processes, output)
    if owt:
        command += ["--num-processes", str(processes), "--num-out-files", str(args.num_out_files)]
        command += ["--max-seq-length", str(args.max_seq_length)]
    results = []
    attempts = [("stopped", args.stop_at), ("rerun", None)] if args.stop_at else [("", None)]
    for label, stop_at in attempts:
        print(f"{spec}{' ' + label if label else ''}: {' '.join(command)}", flush=True)
        m = Measurement(f"{spec}{' ' + label if label else ''}", processes=processes)
        m.corpus_mb = _text_mb(corpus)
        m.load_before = os.getloadavg()[0]
        code, m.wall_s, m.cpu_s, peaks, out, err = run_command(
            command, stop_at, getattr(signal, f"SIG{args.signal}")
        )
        m.load_after = os.getloadavg()[0]
        m.returncode = code
        m.peak_tree_mib = peaks["tree"] / 2**20
        m.peak_process_mib = peaks["process"] / 2**20
        summary = os.path.join(_records_dir(output, owt), "build_summary.json")
        if code == 0 and os.path.exists(summary):
            with open(summary) as f:
                stats = json.load(f)["stats"]
            m.tokens, m.examples = stats["tokens"], stats["examples"]
        if stop_at is not None:
            # A killed parent never reaps its workers: their CPU time is not in wait4's.
            m.cpu_s = float("nan") if code == -signal.SIGKILL else m.cpu_s
            time.sleep(2)
            alive = [p for p in peaks["pids"] if psutil.pid_exists(p)]
            m.note = (
                f"exit {code}; left: {_leftovers(_records_dir(output, owt))}; "
                f"processes still alive: {len(alive)}; {err.strip().splitlines()[-1:]}"
            )
        elif code != 0:
            m.note = f"exit {code}: {err.strip()[-300:]}"
        print(json.dumps(dataclasses.asdict(m)), flush=True)
        results.append(m)
    if not args.keep:
        shutil.rmtree(output, ignore_errors=True)
    return results


def table(results: list[Measurement]) -> str:
    rows = [
        "| run | corpus MB | processes | wall s | CPU s | CPU s / MB | tokens / CPU s | "
        "MB / wall s | peak RSS, tree MiB | peak RSS, largest process MiB | load 1 min, "
        "before / after |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for m in results:
        rows.append(
            f"| {m.run} | {m.corpus_mb:,.0f} | {m.processes} | {m.wall_s:,.0f} | "
            f"{m.cpu_s:,.0f} | {m.cpu_s_per_mb:.2f} | {m.tokens_per_cpu_s:,.0f} | "
            f"{m.mb_per_wall_s:.2f} | {m.peak_tree_mib:,.0f} | {m.peak_process_mib:,.0f} | "
            f"{m.load_before:.1f} / {m.load_after:.1f} |"
        )
    notes = [f"- {m.run}: {m.note}" for m in results if m.note]
    return "\n".join(rows + ([""] + notes if notes else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source-dir", required=True, help="Books to build corpora from.")
    parser.add_argument("--vocab-file", required=True)
    parser.add_argument("--work-dir", required=True, help="Corpora and outputs go here.")
    parser.add_argument("--runs", default="100:1,100:2", help="SIZE:PROCESSES, comma-separated.")
    parser.add_argument("--num-out-files", type=int, default=1000)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--stop-at", type=float, help="Stop each build at this fraction.")
    parser.add_argument("--signal", default="KILL", choices=("KILL", "TERM", "INT"))
    parser.add_argument("--keep", action="store_true", help="Keep the TFRecords.")
    parser.add_argument("--json", help="Also write the measurements here.")
    args = parser.parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs", flush=True)
    results = []
    for spec in args.runs.split(","):
        results += measure(args, spec.strip())
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(m) for m in results], f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
