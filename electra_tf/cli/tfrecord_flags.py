"""Command-line flags shared by data_prep/build_tfrecords.py and build_openwebtext_tfrecords.py."""

from __future__ import annotations

import argparse
import sys

from electra_tf.data.corpus import CorpusError
from electra_tf.data.tfrecord_builder import BuildOptions, build_pretraining_tfrecords
from electra_tf.data.tokenization import VocabError
from electra_tf.runtime.run_lock import LockError, Terminated, report_stop, sigterm_raises

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


def parse_bool(text: str) -> bool:
    """ "false"/"0"/"no" are False (the original's `type=bool` made them True)."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def add_build_flags(parser: argparse.ArgumentParser, one_doc_default: bool = False) -> None:
    """The original's flags plus --seed, --overwrite, --num-out-files, --one-doc-per-file."""
    parser.add_argument("--max-seq-length", type=int, default=128, help="Tokens per example.")
    parser.add_argument("--num-processes", type=int, default=1, help="Worker processes.")
    parser.add_argument(
        "--blanks-separate-docs",
        type=parse_bool,
        nargs="?",
        const=True,
        default=not one_doc_default,
        metavar="BOOL",
        help="Blank lines end documents (default true; --blanks-separate-docs=false or "
        "--no-blanks-separate-docs: each file is one document and blank lines are skipped).",
    )
    parser.add_argument(
        "--no-blanks-separate-docs", dest="blanks_separate_docs", action="store_false"
    )
    parser.add_argument(
        "--one-doc-per-file",
        dest="blanks_separate_docs",
        action="store_false",
        help="The OpenWebText builder's mode; the same as --no-blanks-separate-docs.",
    )
    parser.add_argument("--do-lower-case", dest="do_lower_case", action="store_true")
    parser.add_argument("--no-lower-case", dest="do_lower_case", action="store_false")
    parser.add_argument("--do-strip-accents", dest="strip_accents", action="store_true")
    parser.add_argument("--no-strip-accents", dest="strip_accents", action="store_false")
    parser.set_defaults(do_lower_case=True, strip_accents=True)
    parser.add_argument("--seed", type=int, default=0, help="Shuffling and packing draws.")
    parser.add_argument(
        "--num-out-files", type=int, default=1000, help="Output shards (the original: 1000)."
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Allow a non-empty output directory; removes only files this tool writes.",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    parser.add_argument(
        "--strip-gutenberg-boilerplate",
        dest="strip_gutenberg",
        action="store_true",
        help="Keep only the text between each file's Project Gutenberg START and END lines.",
    )


def options_from_flags(
    args: argparse.Namespace, corpus_dir: str, vocab_file: str, output_dir: str
) -> BuildOptions:
    return BuildOptions(
        corpus_dir=corpus_dir,
        vocab_file=vocab_file,
        output_dir=output_dir,
        max_seq_length=args.max_seq_length,
        num_processes=args.num_processes,
        blanks_separate_docs=args.blanks_separate_docs,
        do_lower_case=args.do_lower_case,
        strip_accents=args.strip_accents,
        seed=args.seed,
        num_out_files=args.num_out_files,
        overwrite=args.overwrite,
        progress=args.progress,
        strip_gutenberg=args.strip_gutenberg,
    )


def run_build(options: BuildOptions) -> int:
    """Runs the build; a bad input, vocabulary or output directory is one line and exit 2.
    SIGTERM and Ctrl-C stop it cleanly: the previous output stays whole, nothing is left."""
    try:
        with sigterm_raises():
            stats = build_pretraining_tfrecords(options)
    except (CorpusError, VocabError, FileExistsError, ValueError, LockError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (Terminated, KeyboardInterrupt) as stop:
        return report_stop(stop, f"{options.output_dir} is as it was before this build")
    print(stats.summary())
    print(f"wrote {options.output_dir}")
    return 0
