"""Moved: this tool is now `python -m electra_tf.evaluation.compare_objectives (or make compare-objectives)`. This stub says so to whoever runs the old path."""

raise SystemExit(
    "bench/compare_objectives.py moved: run python -m electra_tf.evaluation.compare_objectives (or make compare-objectives)"
)
