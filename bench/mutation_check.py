"""Moved: this tool is now `python -m tools.mutation_check`. This stub says so to whoever runs the old path."""

raise SystemExit("bench/mutation_check.py moved: run python -m tools.mutation_check")
