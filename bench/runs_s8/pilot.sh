#!/bin/bash
# pilot.sh CPU NAME EXTRA : #12 session-8 runs, one core each.
# The s6/s7 comparison shape (D 4 x 256, E 128, dropout 0.1) at sequence length SEQ (default
# 64) and batch BATCH (default 32), with INIT (default 0.02, the original's) as the encoders'
# initializer_range. DATA (default g<SEQ>sst: the books plus SST-2's unlabelled training
# sentences at that length) names the folder under data/ whose shards it trains on; the
# held-out shards are data/g<SEQ>'s.
cd "$(dirname "$0")/../.."
CPU=$1; NAME=$2; EXTRA=$3; SEQ=${SEQ:-64}; BATCH=${BATCH:-32}; DATA=${DATA:-g${SEQ}sst}; INIT=${INIT:-0.02}
H="{\"pretrain_tfrecords\": \"data/$DATA/pretrain_tfrecords/pretrain_data.tfrecord*\", \"eval_tfrecords\": \"data/g$SEQ/tfrecords-heldout/pretrain_data.tfrecord*\", \"max_seq_length\": $SEQ, \"train_batch_size\": $BATCH, \"save_checkpoints_steps\": 250, \"num_eval_steps\": 30, \"model_hparam_overrides\": {\"hidden_size\": 256, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"intermediate_size\": 1024, \"hidden_dropout_prob\": 0.1, \"attention_probs_dropout_prob\": 0.1, \"initializer_range\": $INIT}, \"num_warmup_steps\": 400, $EXTRA}"
mkdir -p data/$DATA/logs
echo "$H" > data/$DATA/logs/$NAME.hparams
TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 \
  nice taskset -c $CPU .venv/bin/python -m electra_tf.pretrain --data-dir data/$DATA --model-name $NAME --preset gutenberg --hparams "$H" >> data/$DATA/logs/$NAME.log 2>&1
