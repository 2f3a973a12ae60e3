"""Does pre-training help, and which objective helps most? The measuring commands, part of the
installed package and of its API, as the training commands are (the Makefile's
`compare-objectives` and `learning-test` targets call them; `compare_objectives` reads its
objectives from `configs/ablations/`, beside the presets in `configs/`):

- `python -m electra_tf.evaluation.compare_objectives` (`make compare-objectives`): pre-training
  objectives (`configs/ablations/*.json`) at equal wall time, then SST-2 from each final
  discriminator and from a random initialisation of the same shape. Its parts: `pilot` (the
  seconds per step of one objective, measured as its run will go), `plan` (the steps a budget
  buys, and the checks on the inputs), `launcher` (the runs as processes, two at a time pinned
  to a core each) and `report` (`results.md` / `results.json`, and the ordering against the
  paper's Table 5).
- `python -m electra_tf.evaluation.sst2_transfer`: the SST-2 fine-tuning protocol alone, for any
  list of initialisations (checkpoints or `random`): learning rate chosen on a slice of the
  training set, then the median of several seeds on the dev set.

- `python -m electra_tf.evaluation.learning_test` (`make learning-test`): a synthetic topic
  language whose word clusters only context reveals (`topic_language`), pre-trained with
  ELECTRA and the masked LM at equal CPU time, then fine-tuned on a few hundred labels against a
  random initialisation; `learning_report` prints, records and draws its results. A command,
  not a test module: pytest collects nothing from it (`__test__ = False`).

`plots` draws the measuring commands' pictures (the learning test's here, and those of
`tools/original_parity/curves.py` and the benchmarks), importing matplotlib only when drawing
(the `dev` extra installs it).

Every fine-tuning and pre-training run is the project's own `python -m electra_tf.finetune` /
`python -m electra_tf.pretrain`, so the figures are what a user of those commands gets.
"""
