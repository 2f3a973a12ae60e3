"""Corpus -> pre-training TFRecords, the original `build_pretraining_dataset.py` made safe and fast.

Output format and packing are the original's (`pretrain_data.tfrecord-{k}-of-{n}`, three int64
features of exactly `max_seq_length`, see example_builder.py). Differences, all on purpose:

- Workers (`num_processes`, spawned, TensorFlow-free) tokenise whole input files with the fast
  `FullTokenizer`; the parent writes examples round-robin over all shards in a fixed order (the
  input files sorted, then shuffled by `seed`). Each file's random draws come from
  `(seed, file name)`. So the output is byte-identical for a given seed whatever the number
  of processes.
- The output directory is never deleted: a non-empty one is refused unless `overwrite`, and
  then only files this builder writes are replaced. Every check runs before the output is
  touched; the build is written into a staging folder and swapped in when complete, under a
  lock that refuses a second build into the same directory. No examples at all is an error.
- A stopped build (Ctrl-C, SIGTERM, `kill -9`, a crash) never leaves a mix of two builds:
  stopped before the swap-in, it leaves the previous output as it was (the next build removes
  its staging folder); stopped during the swap-in, the next build (or `complete_swap_in`)
  finishes that swap first, from the list of files it recorded. The summary file is moved
  last, so a folder with a summary and no swap record holds one whole build.
- Bad input is counted and reported instead of raising (see corpus.py); a vocabulary missing
  a special token is an error naming it (load_vocab).
- `blanks_separate_docs` can be turned off (the original's `type=bool` flag could not).
"""

from __future__ import annotations

import dataclasses
import glob
import multiprocessing
import os
import random
import shutil
import signal
import struct
import sys
import tempfile
import time

from electra_tf.data.build_output import (
    LOCK_FILE,
    OWN_OUTPUTS,
    SPOOL_PREFIX,
    STAGING_PREFIX,
    SUMMARY_FILE,
    SWAP_RECORD,
    check_output_dir,
    complete_swap_in,
    is_complete,  # noqa: F401 (importable from here, as before the output helpers moved)
    remove_scratch,
    swap_in,
)
from electra_tf.data.corpus import (
    CorpusError,
    CorpusInput,
    CorpusScan,
    iter_text_files,
    scan_corpus,
)
from electra_tf.data.example_builder import ExampleBuilder, ExampleSerializer
from electra_tf.data.tfrecord_io import TFRecordWriter
from electra_tf.data.tokenization import FullTokenizer, id_count, load_vocab
from electra_tf.runtime.atomic_io import write_json
from electra_tf.runtime.run_lock import RunLock

SHARD_PATTERN = "pretrain_data.tfrecord-{k}-of-{n}"
LONG_LINE_EXAMPLES = 8  # a line with more tokens than this many examples is reported
MIN_SEQ_LENGTH = 5  # [CLS] + two segments of at least one token + two [SEP]s
# Every example is padded to max_seq_length, and a model reads at most its position table:
# the shipped configs' tables hold 512 positions (`max(512, max_seq_length)` in config.py),
# and attention's memory grows with the square of the length. Past this, a build writes
# padding no model trains on (100,000 wrote 35 MB of it from 40 KB of text).
MAX_SEQ_LENGTH = 4096


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """What `build_pretraining_tfrecords` does; flag names follow the original's CLI."""

    corpus_dir: str
    vocab_file: str
    output_dir: str
    max_seq_length: int = 128
    num_processes: int = 1
    blanks_separate_docs: bool = True  # False: each file is one document, blank lines skipped
    do_lower_case: bool = True
    strip_accents: bool = True
    seed: int = 0
    num_out_files: int = 1000
    overwrite: bool = False
    progress: bool = True
    strip_gutenberg: bool = False  # keep only the text between Gutenberg START/END markers


@dataclasses.dataclass
class BuildStats:
    """Counts over the whole build (summed from workers)."""

    input_files: int = 0
    text_files: int = 0
    skipped: list[str] = dataclasses.field(default_factory=list)  # "name: reason"
    # "name:line (N characters, T tokens)" of lines far longer than an example: the original's
    # packing puts a line in one example, so all but its first max_seq_length tokens are lost.
    long_lines: list[str] = dataclasses.field(default_factory=list)
    bytes_read: int = 0
    replaced_chars: int = 0
    documents: int = 0
    lines: int = 0
    tokens: int = 0  # WordPiece tokens of the corpus, before truncation
    unk_tokens: int = 0
    examples: int = 0
    example_tokens: int = 0  # positions with input_mask 1 ([CLS]/[SEP] included)
    padding: int = 0  # positions with input_mask 0
    seconds: float = 0.0
    vocab_size: int = 0  # entries of the vocabulary the ids index (the run checks its model's)
    shards: int = 0

    def add(self, other: BuildStats) -> None:
        for field in dataclasses.fields(self):
            if field.name in ("seconds", "shards", "vocab_size"):
                continue
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def summary(self) -> str:
        slots = self.example_tokens + self.padding
        lines = [
            f"documents {self.documents:,}, lines {self.lines:,}, tokens {self.tokens:,}",
            f"examples {self.examples:,} in {self.shards} shards, "
            f"padding {100.0 * self.padding / max(1, slots):.1f}%, "
            f"[UNK] {100.0 * self.unk_tokens / max(1, self.tokens):.3f}% of tokens",
            f"{self.text_files:,} text files from {self.input_files:,} inputs, "
            f"{self.bytes_read / 1e6:,.1f} MB, {self.replaced_chars:,} undecodable bytes "
            f"replaced; {self.tokens / max(self.seconds, 1e-9):,.0f} tokens/s "
            f"over {self.seconds:,.1f} s",
        ]
        if self.skipped:
            shown = ", ".join(self.skipped[:5]) + (" ..." if len(self.skipped) > 5 else "")
            lines.append(f"skipped {len(self.skipped)} file(s): {shown}")
        if self.long_lines:
            shown = ", ".join(self.long_lines[:3]) + (" ..." if len(self.long_lines) > 3 else "")
            lines.append(
                f"warning: {len(self.long_lines)} line(s) hold over {LONG_LINE_EXAMPLES} "
                f"examples' worth of tokens and were cut to one example each: {shown}; "
                "split such text into lines (sentences or paragraphs)"
            )
        return "\n".join(lines)


# ---------------------------------------------------------------------------- worker side
_worker: dict = {}


def _quiet_worker_signals() -> None:
    """A worker leaves stopping to the parent: Ctrl-C reaches the whole process group, and the
    parent's clean-up terminates the pool, so a worker exits at once and without a traceback
    (it used to print BrokenPipe / KeyboardInterrupt tracebacks on the way out)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))


def _init_worker(options: BuildOptions, spool_dir: str, progress_counter) -> None:
    if multiprocessing.parent_process() is not None:
        _quiet_worker_signals()
    tokenizer = FullTokenizer(options.vocab_file, options.do_lower_case, options.strip_accents)
    _worker.update(
        options=options,
        spool_dir=spool_dir,
        tokenizer=tokenizer,
        serializer=ExampleSerializer(options.max_seq_length, id_count(tokenizer.vocab)),
        counter=progress_counter,
    )


def _pack_file(text_file, options, tokenizer, emit, stats: BuildStats, counter) -> int:
    """Tokenises one text file's lines and packs them into examples (`emit` writes each);
    returns the bytes already reported to the progress counter."""
    vocab = tokenizer.vocab
    # Per-file randomness: independent of process count and of earlier files.
    rng = random.Random(f"{options.seed}:{text_file.name}")
    builder = ExampleBuilder(options.max_seq_length, vocab["[CLS]"], vocab["[SEP]"], rng)
    in_document = False
    reported = 0
    for number, line in enumerate(text_file.lines(options.strip_gutenberg), 1):
        line = line.strip()
        if not line:
            if options.blanks_separate_docs:
                emit(builder.flush())
                in_document = False
            continue
        ids = tokenizer.tokenize_to_ids(line)
        if len(ids) > LONG_LINE_EXAMPLES * options.max_seq_length:
            where = f"{text_file.name}:{number}"
            stats.long_lines.append(f"{where} ({len(line):,} characters, {len(ids):,} tokens)")
        stats.lines += 1
        stats.tokens += len(ids)
        stats.unk_tokens += ids.count(tokenizer.unk_id)
        if not in_document:
            stats.documents += 1
            in_document = True
        emit(builder.add_line(ids))
        if counter is not None and stats.lines % 2048 == 0:
            with counter.get_lock():
                counter.value += text_file.bytes_read - reported
            reported = text_file.bytes_read
    emit(builder.flush())
    return reported


def _process_input(job: tuple[int, CorpusInput]) -> tuple[int, BuildStats, str]:
    """Tokenises and packs one input; examples go to a spool file the parent copies in order."""
    index, item = job
    options: BuildOptions = _worker["options"]
    tokenizer: FullTokenizer = _worker["tokenizer"]
    serializer: ExampleSerializer = _worker["serializer"]
    counter = _worker["counter"]
    stats = BuildStats(input_files=1)
    spool_path = os.path.join(_worker["spool_dir"], f"{index:09d}.bin")
    pack = struct.Struct("<I").pack
    with open(spool_path, "wb") as spool:

        def emit(example: tuple[list[int], list[int]] | None) -> None:
            if example is None:
                return
            input_ids, segment_ids = example
            record = serializer.serialize(input_ids, segment_ids)
            spool.write(pack(len(record)))
            spool.write(record)
            stats.examples += 1
            stats.example_tokens += len(input_ids)
            stats.padding += options.max_seq_length - len(input_ids)

        for text_file in iter_text_files(item):
            if text_file.skip_reason:
                stats.skipped.append(f"{text_file.name}: {text_file.skip_reason}")
                continue
            stats.text_files += 1
            reported = _pack_file(text_file, options, tokenizer, emit, stats, counter)
            stats.bytes_read += text_file.bytes_read
            stats.replaced_chars += text_file.replaced_chars
            if counter is not None:
                with counter.get_lock():
                    counter.value += text_file.bytes_read - reported
    return index, stats, spool_path


# ---------------------------------------------------------------------------- parent side
class _Progress:
    def __init__(self, total_files: int, total_bytes: int, enabled: bool) -> None:
        self.total_files = total_files
        self.total_bytes = total_bytes
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.start = time.perf_counter()
        self.last = 0.0

    def update(self, files: int, bytes_done: int, tokens: int, final: bool = False) -> None:
        now = time.perf_counter()
        if not self.enabled or (not final and now - self.last < (0.5 if self.tty else 10.0)):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        frac = min(1.0, bytes_done / max(1, self.total_bytes))
        bar = "#" * int(24 * frac) + "." * (24 - int(24 * frac))
        line = (
            f"[{bar}] files {files}/{self.total_files} "
            f"{bytes_done / 1e6:,.1f}/{self.total_bytes / 1e6:,.1f} MB "
            f"{tokens / elapsed:,.0f} tokens/s"
        )
        end = "\n" if final or not self.tty else ""
        print(("\r" if self.tty else "") + line, end=end, file=sys.stderr, flush=True)


def check_options(options: BuildOptions) -> CorpusScan:
    """Every check that needs no output: options, vocabulary, inputs, the output directory.
    Returns the corpus's inputs and the entries skipped. Nothing is written before this
    passes."""
    if options.num_processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {options.num_processes}")
    if options.num_out_files < 1:
        raise ValueError(f"num_out_files must be >= 1, got {options.num_out_files}")
    if not MIN_SEQ_LENGTH <= options.max_seq_length <= MAX_SEQ_LENGTH:
        raise ValueError(
            f"max_seq_length {options.max_seq_length}: must be in [{MIN_SEQ_LENGTH}, "
            f"{MAX_SEQ_LENGTH}]: every example is padded to it, and the shipped configs' "
            "models read at most 512 positions"
        )
    load_vocab(options.vocab_file)  # fail before any work if a special token is missing
    # Output in (or equal to) the corpus folder: its records and summary are skipped, listed.
    scan = scan_corpus(options.corpus_dir, options.output_dir, OWN_OUTPUTS)
    if not scan.inputs:
        skipped = f" (skipped: {', '.join(scan.skipped[:5])})" if scan.skipped else ""
        raise CorpusError(f"no files to read in corpus directory {options.corpus_dir}{skipped}")
    check_output_dir(options.output_dir, options.overwrite)
    return scan


def build_pretraining_tfrecords(options: BuildOptions) -> BuildStats:
    """Writes `options.num_out_files` shards under `options.output_dir`; returns the counts.

    Everything is checked before the output is touched; the build runs in a staging folder
    inside the output directory (under the directory's lock, `electra_tf.runtime.run_lock`) and is
    swapped in at the end, so a failed or interrupted build leaves the previous one whole."""
    scan = check_options(options)
    inputs = scan.inputs
    random.Random(options.seed).shuffle(inputs)  # the original shuffled its files too
    with RunLock(options.output_dir, LOCK_FILE, "output directory"):
        if complete_swap_in(options.output_dir):
            print(
                f"finished the swap-in of a build stopped half-way: {options.output_dir} "
                "holds that whole build",
                file=sys.stderr,
            )
        check_output_dir(options.output_dir, options.overwrite)  # again, now that it is ours
        remove_scratch(options.output_dir)
        staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=options.output_dir)
        try:
            stats = _build(options, inputs, staging)
            stats.skipped[:0] = scan.skipped
            if stats.examples == 0:
                skipped = f" (skipped: {', '.join(stats.skipped[:5])})" if stats.skipped else ""
                raise CorpusError(
                    f"no examples from the {stats.input_files} input(s) in {options.corpus_dir}: "
                    f"{stats.text_files} readable text file(s), {stats.lines} non-empty "
                    f"line(s){skipped}; the output directory was left as it was"
                )
            _write_summary(options, stats, staging)
            swap_in(staging, options.output_dir)
        finally:
            # A swap-in stopped half-way keeps its staging folder: the next build finishes it.
            if not os.path.exists(os.path.join(options.output_dir, SWAP_RECORD)):
                shutil.rmtree(staging, ignore_errors=True)
    return stats


def _build(options: BuildOptions, inputs: list[CorpusInput], staging: str) -> BuildStats:
    start = time.perf_counter()
    stats = BuildStats(vocab_size=id_count(load_vocab(options.vocab_file)))
    n = options.num_out_files
    final_paths = [os.path.join(staging, SHARD_PATTERN.format(k=k, n=n)) for k in range(n)]
    spool_dir = tempfile.mkdtemp(prefix=SPOOL_PREFIX, dir=staging)
    writers = [TFRecordWriter(p + ".incomplete") for p in final_paths]
    progress = _Progress(len(inputs), sum(i.size for i in inputs), options.progress)
    ctx = multiprocessing.get_context("spawn")
    counter = ctx.Value("q", 0)
    jobs = list(enumerate(inputs))
    pool = None
    try:
        if options.num_processes == 1:
            _init_worker(options, spool_dir, counter)
            results = map(_process_input, jobs)
        else:
            pool = ctx.Pool(options.num_processes, _init_worker, (options, spool_dir, counter))
            results = pool.imap(_process_input, jobs, chunksize=1)
        done = 0
        while done < len(jobs):
            try:
                _, unit_stats, spool_path = (
                    results.next(timeout=0.5) if pool is not None else next(results)
                )
            except multiprocessing.TimeoutError:
                progress.update(done, counter.value, stats.tokens)
                continue
            stats.add(unit_stats)
            _copy_spool(spool_path, writers, stats.examples - unit_stats.examples)
            done += 1
            progress.update(done, counter.value, stats.tokens)
        if pool is not None:
            pool.close()
            pool.join()
    finally:
        if pool is not None:
            pool.terminate()
        for writer in writers:
            writer.close()
        shutil.rmtree(spool_dir, ignore_errors=True)
    for path in final_paths:
        os.replace(path + ".incomplete", path)
    stats.seconds = time.perf_counter() - start
    stats.shards = n
    progress.update(len(jobs), counter.value, stats.tokens, final=True)
    return stats


def _copy_spool(spool_path: str, writers: list, first_index: int) -> None:
    """Appends one input's examples round-robin over all shards, continuing the global count."""
    index = first_index
    n = len(writers)
    with open(spool_path, "rb") as spool:
        while header := spool.read(4):
            (length,) = struct.unpack("<I", header)
            writers[index % n].write(spool.read(length))
            index += 1
    os.remove(spool_path)


def _write_summary(options: BuildOptions, stats: BuildStats, directory: str) -> None:
    summary = {"options": dataclasses.asdict(options), "stats": dataclasses.asdict(stats)}
    path = os.path.join(directory, SUMMARY_FILE)
    write_json(path, summary, indent=2)


def shard_paths(output_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(output_dir, "pretrain_data.tfrecord-*-of-*")))
