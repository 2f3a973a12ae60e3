#!/bin/bash
# pilot.sh CPU NAME EXTRA : #12 session-7 pilots on the seq-64 data, one core each.
# The s6 comparison shape (D 4 x 256, E 128, dropout 0.1) with the generator and masking varied.
# DATA (default g64) names the folder under data/ whose shards it trains on; the held-out
# shards are always data/g64's.
cd "$(dirname "$0")/../.."
CPU=$1; NAME=$2; EXTRA=$3; DATA=${DATA:-g64}
H="{\"pretrain_tfrecords\": \"data/$DATA/pretrain_tfrecords/pretrain_data.tfrecord*\", \"eval_tfrecords\": \"data/g64/tfrecords-heldout/pretrain_data.tfrecord*\", \"max_seq_length\": 64, \"save_checkpoints_steps\": 500, \"num_eval_steps\": 30, \"model_hparam_overrides\": {\"hidden_size\": 256, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"intermediate_size\": 1024, \"hidden_dropout_prob\": 0.1, \"attention_probs_dropout_prob\": 0.1}, \"num_warmup_steps\": 400, $EXTRA}"
mkdir -p data/$DATA/logs
echo "$H" > data/$DATA/logs/$NAME.hparams
TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 \
  nice taskset -c $CPU .venv/bin/python -m electra_tf.pretrain --data-dir data/$DATA --model-name $NAME --preset gutenberg --hparams "$H" >> data/$DATA/logs/$NAME.log 2>&1
