#!/usr/bin/env bash
# The main job, end to end on one CPU machine with no download:
#   text -> vocab -> pretraining shards -> tiny BERT pretraining -> fine-tuning.
# DEMO_DIR (default ./demo) holds everything; re-running replaces it.
set -euo pipefail
OUT=${DEMO_DIR:-demo}
# Sized to finish within 5 minutes after set-up on 2 quiet cores: half the training steps of the earlier run
# (about 7 minutes there): 300 pretraining steps, then 2 epochs over 2,000 SST-2 rows at a higher rate (1e-3:
# at 3e-4 these 126 steps stay at the majority class, 0.509). DEMO_FULL=1 is the earlier run (600 steps,
# 4,000 rows, 3e-4).
if [ "${DEMO_FULL:-0}" = 1 ]; then
    STEPS=${DEMO_STEPS:-600}; TASK_ROWS=4000; TASK_LR=3e-4
else
    STEPS=${DEMO_STEPS:-300}; TASK_ROWS=2000; TASK_LR=1e-3
fi
# berttrain chooses its CPU threads (the cores it may use, OpenMP's spin bounded, said in its run line; --threads sets them).
# Each setting checked before minutes of work, one line each (DEMO_STEPS=abc failed at the export, after the
# corpus, the vocabulary, the shards and the whole pretraining).
[[ ${DEMO_FULL:-0} =~ ^[01]$ ]] || { echo "Error: DEMO_FULL must be 0 or 1, got '${DEMO_FULL}'" >&2; exit 2; }
[[ $STEPS =~ ^[1-9][0-9]{0,6}$ ]] ||
    { echo "Error: DEMO_STEPS must be a whole number of steps from 1 to 9999999, got '$STEPS'" >&2; exit 2; }
[[ -z ${OMP_NUM_THREADS+x} || $OMP_NUM_THREADS =~ ^[1-9][0-9]{0,3}$ ]] ||
    { echo "Error: OMP_NUM_THREADS must be a whole number >= 1, got '$OMP_NUM_THREADS'" >&2; exit 2; }
# Task files given must be there now, not at stage 5 after the whole pretraining (DEMO_TASK_TRAIN=/nonexistent).
for task_var in DEMO_TASK_TRAIN DEMO_TASK_DEV; do
    task_file=${!task_var:-}
    [[ -z $task_file || ( -f $task_file && -r $task_file ) ]] ||
        { echo "Error: $task_var=$task_file is not a readable file: name the task's file, or leave it unset" >&2; exit 2; }
done
[[ -z ${DEMO_TASK_TRAIN:-} || -n ${DEMO_TASK_DEV:-} ]] ||
    { echo "Error: DEMO_TASK_TRAIN is set but DEMO_TASK_DEV is not: the fine-tuning needs both files" >&2; exit 2; }
# Seconds per stage, printed at the end: a slow machine's run can be told from a stuck one.
SPLIT=""
stage_done() { SPLIT="$SPLIT $1 ${SECONDS}s,"; SECONDS=0; }
SECONDS=0

# Re-running replaces DEMO_DIR whole, so it must be a demo's: absent, empty, or marked by an earlier demo. Entries
# that merely bear demo names (run, shards, ...) are no proof: DEMO_DIR=~/project holding run/checkpoints of
# three weeks' training was deleted so. A folder of an earlier demo from before the mark is refused too.
DEMO_MARK=.bertstream-demo
if [ -e "$OUT" ] || [ -L "$OUT" ]; then
    if [ ! -d "$OUT" ]; then
        echo "Error: DEMO_DIR=$OUT is a file, not a demo's folder: name a new folder" >&2; exit 2
    fi
    if [ ! -f "$OUT/$DEMO_MARK" ] && [ -n "$(ls -A "$OUT")" ]; then
        held=$(ls -A "$OUT" | head -5 | tr '\n' ' ')
        echo "Error: DEMO_DIR=$OUT holds ${held% }$([ "$(ls -A "$OUT" | wc -l)" -gt 5 ] && echo ' ...') and no $DEMO_MARK mark, so no demo wrote it: the demo replaces its folder whole; name a new or empty folder (or remove it yourself if it is an old demo's)" >&2
        exit 2
    fi
fi
echo "== 1. corpus: Python's reference documentation (ships with Python), 1 in 8 topics held out"
rm -rf "$OUT"
mkdir -p "$OUT" && : > "$OUT/$DEMO_MARK"
bertprep demo-corpus "$OUT/corpus" --holdout-every 8
stage_done corpus

echo "== 2. WordPiece vocabulary"
bertprep vocab --input "$OUT/corpus/*.txt" --format text --vocab-size 8000 --output "$OUT/vocab"
stage_done vocab

echo "== 3. pretraining shards (Beam, in-process runner): train and held-out eval"
bertprep pretraining --input "$OUT/corpus/*.txt" --format text --vocab "$OUT/vocab/vocab.txt" \
    --output "$OUT/shards" --dupe-factor 10 --output-format both
bertprep pretraining --input "$OUT/corpus/heldout/*.txt" --format text --vocab "$OUT/vocab/vocab.txt" \
    --output "$OUT/eval_shards" --dupe-factor 2 --num-shards 1
bertprep inspect "$OUT/shards" --verify --decode 2
bertprep report "$OUT/shards"   # the data report page: prints its path
stage_done shards

echo "== 4. pretrain a tiny BERT for $STEPS steps (MLM accuracy on held-out text rises)"
berttrain pretrain --data "$OUT/shards" --eval-data "$OUT/eval_shards" --model tiny --output "$OUT/run" \
    --batch-size 32 --lr 1e-3 --warmup-steps 60 --max-steps "$STEPS" --log-every 50 --eval-every 100 \
    --checkpoint-every 200 --num-workers 1
berttrain plot "$OUT/run"
berttrain export-hf "$OUT/run/checkpoints/step-$(printf %07d "$STEPS")" "$OUT/hf"
stage_done pretrain

echo "== 5. fine-tune the demo model on a downstream task"
# Any classification files: DEMO_TASK_TRAIN / DEMO_TASK_DEV (tsv/csv/jsonl) with DEMO_TASK_ARGS naming the
# columns (e.g. "--text-column sentence --label-column label"); by default a slice of SST-2 from ../shared.
SHARED_SST2=${SHARED:-../shared/data}/tasks/sst2
if [ -z "${DEMO_TASK_TRAIN:-}" ] && [ -f "$SHARED_SST2/train.tsv" ]; then
    head -n $((TASK_ROWS + 1)) "$SHARED_SST2/train.tsv" > "$OUT/sst2_train.tsv"  # the header and TASK_ROWS rows
    DEMO_TASK_TRAIN="$OUT/sst2_train.tsv" DEMO_TASK_DEV="$SHARED_SST2/dev.tsv" DEMO_TASK_ARGS="--glue sst2" DEMO_TASK_NAME=SST-2
fi
if [ -n "${DEMO_TASK_TRAIN:-}" ]; then
    CKPT="$OUT/run/checkpoints/step-$(printf %07d "$STEPS")"
    # shellcheck disable=SC2086  # DEMO_TASK_ARGS holds several flags
    bertprep task classification --input "$DEMO_TASK_TRAIN" --split train --vocab "$CKPT/vocab.txt" \
        --output "$OUT/task_train" $DEMO_TASK_ARGS
    # shellcheck disable=SC2086
    bertprep task classification --input "$DEMO_TASK_DEV" --split dev --vocab "$CKPT/vocab.txt" \
        --label-set-from "$OUT/task_train" --output "$OUT/task_dev" $DEMO_TASK_ARGS
    finetune() {  # $1: --init, $2: the run folder; one command, so both inits get the same settings
        berttrain finetune --task classification --train-data "$OUT/task_train" --eval-data "$OUT/task_dev" \
            --init "$1" --output "$2" --epochs 2 --lr "$TASK_LR" --batch-size 32
    }
    finetune "$CKPT" "$OUT/finetune"
    stage_done finetune
    echo "== 6. the same fine-tuning from random weights (the checkpoint's architecture, freshly initialised)"
    finetune "random:$CKPT" "$OUT/finetune_random"
    stage_done random_init
    GAIN=$(python3 "$(dirname "$0")/init_gain.py" "$OUT/finetune" "$OUT/finetune_random" \
        --task "${DEMO_TASK_NAME:-the task}")
else
    echo "no task data: set DEMO_TASK_TRAIN/DEMO_TASK_DEV, or place ../shared/data beside the checkout"
fi

echo "== done, time per stage:${SPLIT%,}"
[ -n "${GAIN:-}" ] && echo "$GAIN"
echo "outputs (README, 'After the demo'):"
echo "  $OUT/shards/report/index.html   the data report"
echo "  $OUT/shards, $OUT/eval_shards    pretraining shards (Arrow + WebDataset), manifest.json"
echo "  $OUT/run                         metrics.jsonl, curves.png, checkpoints/"
echo "  $OUT/hf                          the model for Hugging Face (AutoModel.from_pretrained)"
[ -d "$OUT/finetune" ] && echo "  $OUT/finetune                    results.json, predictions.tsv, the best checkpoint"
[ -d "$OUT/finetune_random" ] && echo "  $OUT/finetune_random             the same from random weights: results.json"
echo "the commands: 'source .venv/bin/activate' puts bertprep and berttrain on PATH (or run .venv/bin/bertprep),"
echo "then e.g. 'bertprep inspect $OUT/shards' or 'berttrain plot $OUT/run'"
true
