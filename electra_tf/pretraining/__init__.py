"""Pre-training, the one stage of that name: the ELECTRA objective (in-graph masking, sampling,
the losses, the pretrainer Model). The run that trains it (train / evaluate with resumable
checkpoints, progress lines) is `electra_tf.runs.pretraining`, above the checkpoints."""

from electra_tf.pretraining.losses import electra_loss
from electra_tf.pretraining.masking import candidates_mask, mask_inputs
from electra_tf.pretraining.pretrainer import ElectraPretrainer
from electra_tf.pretraining.sampling import gather_positions, gumbel_sample, scatter_update

__all__ = [
    "ElectraPretrainer",
    "electra_loss",
    "candidates_mask",
    "gather_positions",
    "gumbel_sample",
    "mask_inputs",
    "scatter_update",
]
