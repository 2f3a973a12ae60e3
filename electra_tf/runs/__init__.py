"""Runs: a config turned into a training or evaluation run, above the checkpoints it loads and
saves.

A run is a distribution strategy (`strategy`), its input (`pretraining_data`), the model and
its optimizer (`pretraining_model`), resuming from the model dir's checkpoints, the signals
that stop it (`signals`), its progress lines and TensorBoard scalars (`progress`, `cpu_calls`)
and evaluation. `pretraining` is the top of the pre-training run: `train(config)` and
`evaluate(config)`. The objectives and models the run trains sit below, in `pretraining`,
`finetuning` and `modeling`; the command lines and the API sit above.
"""
