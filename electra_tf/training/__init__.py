"""The pre-training loop: checkpoints that resume exactly, progress reporting, the run itself."""
