"""Runs: a pre-training or fine-tuning run from start to end, above the checkpoints they load and save."""
