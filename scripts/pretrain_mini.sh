#!/usr/bin/env bash
# Pretrain a mini BERT (L4 H256 A4) on the shared Wikipedia extracts and Gutenberg books, 30 minutes of CPU
# at most, and plot its curves. Needs ../shared/data. RUNS (default ./runs) holds the outputs.
set -euo pipefail
S=${SHARED:-../shared/data}/pretrain
OUT=${RUNS:-runs}/mini
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
bertprep vocab --input "wikiextractor:$S/wikipedia/wiki_*" --input "text:$S/gutenberg/*.txt" --vocab-size 16000 \
    --output "$OUT/vocab"
# wiki_15 is held out for evaluation.
bertprep pretraining --input "wikiextractor:$S/wikipedia/wiki_0*" --input "wikiextractor:$S/wikipedia/wiki_1[0-4]" \
    --input "text:$S/gutenberg/*.txt" --vocab "$OUT/vocab/vocab.txt" --output "$OUT/shards" --dupe-factor 5 \
    --num-shards 8 --overwrite
bertprep pretraining --input "wikiextractor:$S/wikipedia/wiki_15" --vocab "$OUT/vocab/vocab.txt" \
    --output "$OUT/eval_shards" --dupe-factor 1 --num-shards 1 --overwrite
berttrain pretrain --data "$OUT/shards" --eval-data "$OUT/eval_shards" --model mini --output "$OUT/run" \
    --batch-size 32 --lr 1e-3 --warmup-steps 200 --max-steps 2000 --max-minutes 29 --log-every 25 \
    --eval-every 250 --eval-batches 20 --checkpoint-every 500 --num-workers 1
berttrain plot "$OUT/run" --baseline-from "$OUT/eval_shards"
