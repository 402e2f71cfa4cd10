#!/usr/bin/env bash
# The main job, end to end on one CPU machine with no download:
#   text -> vocab -> pretraining shards -> tiny BERT pretraining -> fine-tuning.
# DEMO_DIR (default ./demo) holds everything; re-running replaces it.
set -euo pipefail
OUT=${DEMO_DIR:-demo}
STEPS=${DEMO_STEPS:-600}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

echo "== 1. corpus: Python's reference documentation (ships with Python), 1 in 8 topics held out"
rm -rf "$OUT"
bertprep demo-corpus "$OUT/corpus" --holdout-every 8

echo "== 2. WordPiece vocabulary"
bertprep vocab --input "$OUT/corpus/*.txt" --format text --vocab-size 8000 --output "$OUT/vocab"

echo "== 3. pretraining shards (Beam, in-process runner): train and held-out eval"
bertprep pretraining --input "$OUT/corpus/*.txt" --format text --vocab "$OUT/vocab/vocab.txt" \
    --output "$OUT/shards" --dupe-factor 10 --output-format both
bertprep pretraining --input "$OUT/corpus/heldout/*.txt" --format text --vocab "$OUT/vocab/vocab.txt" \
    --output "$OUT/eval_shards" --dupe-factor 2 --num-shards 1
bertprep inspect "$OUT/shards" --verify --decode 2

echo "== 4. pretrain a tiny BERT for a few minutes (MLM accuracy on held-out text rises)"
berttrain pretrain --data "$OUT/shards" --eval-data "$OUT/eval_shards" --model tiny --output "$OUT/run" \
    --batch-size 32 --lr 1e-3 --warmup-steps 60 --max-steps "$STEPS" --log-every 50 --eval-every 100 \
    --checkpoint-every 200 --num-workers 1
berttrain plot "$OUT/run"
berttrain export-hf "$OUT/run/checkpoints/step-$(printf %07d "$STEPS")" "$OUT/hf"
