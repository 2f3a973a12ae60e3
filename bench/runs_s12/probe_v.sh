#!/bin/bash
# probe_v.sh CPU NAME INIT LR [EXTRA] : issue #12, session 12. The validation-slice probe of
# bench/runs_s7/probe.sh (first 2,000 training sentences, 3 epochs, length 64, seed 0, scored on
# the last 2,000 training sentences) for the eighth round's review-aware vocabulary (data/g64v),
# pinned to core CPU with one thread. INIT is a checkpoint or "random" (the #12 shape).
cd "$(dirname "$0")/../.."
CPU=$1; NAME=$2; INIT=$3; LR=$4; EXTRA=${5:+, $5}
D=data/probe12
mkdir -p $D && { [ -d $D/finetuning_data ] || cp -r data/cmp12v/out/sst2/val/finetuning_data $D/; }
if [ "$INIT" = random ]; then I='"init_checkpoint": null, "model_hparam_overrides": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024}, "embedding_size": 128'; else I="\"init_checkpoint\": \"$INIT\""; fi
H="{\"max_seq_length\": 64, \"num_train_epochs\": 3.0, \"layerwise_lr_decay\": 1.0, \"vocab_file\": \"$PWD/data/g64v/vocab.txt\", \"vocab_size\": 15582, $I, \"max_train_examples\": 2000, \"learning_rate\": $LR, \"overwrite\": true $EXTRA}"
TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 \
  taskset -c "$CPU" .venv/bin/python -m electra_tf.finetune --data-dir $D --model-name "$NAME" --tasks sst --hparams "$H" > $D/"$NAME".log 2>&1
echo "$NAME $INIT lr=$LR $EXTRA $(grep 'sst: accuracy' $D/"$NAME".log | tail -1)" | tee -a $D/results.txt
