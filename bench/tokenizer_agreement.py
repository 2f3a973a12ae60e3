"""Moved: this tool is now `python -m tools.tokenizer_agreement`. This stub says so to whoever runs the old path."""

raise SystemExit("bench/tokenizer_agreement.py moved: run python -m tools.tokenizer_agreement")
