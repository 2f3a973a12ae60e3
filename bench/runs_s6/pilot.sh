#!/bin/bash
# usage: pilot.sh CPU NAME HPARAMS_EXTRA
cd "$(dirname "$0")/../.."
CPU=$1; NAME=$2; EXTRA=$3
H="{\"pretrain_tfrecords\": \"data/g64/pretrain_tfrecords/pretrain_data.tfrecord*\", \"eval_tfrecords\": \"data/g64/tfrecords-heldout/pretrain_data.tfrecord*\", \"max_seq_length\": 64, \"save_checkpoints_steps\": 500, \"num_eval_steps\": 30, $EXTRA}"
echo "$H" > data/g64/logs/$NAME.hparams
TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 \
  nice taskset -c $CPU .venv/bin/python -m electra_tf.pretrain --data-dir data/g64 --model-name $NAME --preset gutenberg --hparams "$H"
