#!/bin/bash
# probe.sh NAME INIT LR [EXTRA] : SST-2 validation-slice probe (first 2,000 train sentences,
# 3 epochs, length 64, seed 0), as bench/runs_s6/probe.sh plus extra fine-tuning hparams.
cd "$(dirname "$0")/../.."
NAME=$1; INIT=$2; LR=$3; EXTRA=${4:+, $4}
mkdir -p data/probe && [ -d data/probe/finetuning_data ] || cp -r data/sst2/val/finetuning_data data/probe/
if [ "$INIT" = random ]; then I='"init_checkpoint": null, "model_hparam_overrides": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024}, "embedding_size": 128'; else I="\"init_checkpoint\": \"$INIT\""; fi
H="{\"max_seq_length\": 64, \"num_train_epochs\": 3.0, \"layerwise_lr_decay\": 1.0, \"vocab_file\": \"$PWD/data/g64/vocab.txt\", \"vocab_size\": 15971, $I, \"max_train_examples\": 2000, \"learning_rate\": $LR, \"overwrite\": true $EXTRA}"
TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python -m electra_tf.finetune --data-dir data/probe --model-name $NAME --tasks sst --hparams "$H" > data/probe/$NAME.log 2>&1
echo "$NAME $INIT lr=$LR $EXTRA $(grep 'sst: accuracy' data/probe/$NAME.log | tail -1)" | tee -a data/probe/results.txt
