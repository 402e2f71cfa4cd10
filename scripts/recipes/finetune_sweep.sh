#!/usr/bin/env bash
# Which fine-tuning settings does a checkpoint want? A grid of learning rates and epochs, each cell fine-tuned
# from the checkpoint and from its architecture randomly initialised (--init random:CKPT), each seed, the
# settings of scripts/recipes/pretraining_gain.sh otherwise (batch 32, 10% warm-up, dropout 0.1, mean pooling);
# OUT/sweep.json and a table on stdout. A fair choice holds both inits: the random init gets every cell too.
#
#   scripts/recipes/finetune_sweep.sh CHECKPOINT TASK_DATA OUT
#
# TASK_DATA holds TASK_train and TASK_dev datasets (bertprep task, the checkpoint's vocabulary), e.g. the
# tasks_data folder of a pretraining_gain.sh run. Settings (TASKS, LRS, EPOCHS, SEEDS, PARALLEL, PRECISION):
# scripts/recipes/configs/finetune_sweep.env holds each one's default and what it does; a file of your own
# overrides them (CONFIG=my.env), the environment overrides both. Finished cells are kept, each with the key of what
# made it (scripts/recipes/finetune_run.sh: the checkpoint's and data's content, the settings): a killed sweep
# continues where it stopped, and a sweep of another checkpoint into the same OUT runs its own cells.
set -euo pipefail
[ $# -eq 3 ] || { echo "Error: usage: scripts/recipes/finetune_sweep.sh CHECKPOINT TASK_DATA OUT" >&2; exit 2; }
CKPT=$(cd "$1" 2>/dev/null && pwd) || { echo "Error: checkpoint folder $1 not found" >&2; exit 2; }
DATA=$2 OUT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/config.sh"
load_config finetune_sweep
for t in $TASKS; do
    for split in train dev; do
        [ -f "$DATA/${t}_$split/manifest.json" ] || { echo "Error: $DATA/${t}_$split is not a task dataset" >&2; exit 2; }
    done
    [[ " $EPOCHS " =~ \ $t:[0-9,]+\  ]] || { echo "Error: EPOCHS has no epochs for task $t (EPOCHS=$EPOCHS)" >&2; exit 2; }
done
check_processes PARALLEL
check_numbers 0 1 LRS
for s in $SEEDS; do [[ $s =~ ^[0-9]+$ ]] || { echo "Error: SEEDS must be whole numbers, got '$SEEDS'" >&2; exit 2; }; done
for e in $EPOCHS; do
    [[ $e =~ ^[a-z0-9]+:[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "Error: EPOCHS must be TASK:N[,N...] words, got '$EPOCHS'" >&2; exit 2; }
done
case $PRECISION in fp32 | bf16 | auto) ;; *) echo "Error: PRECISION must be fp32, bf16 or auto, got '$PRECISION'" >&2; exit 2 ;; esac
mkdir -p "$OUT"
. "$HERE/finetune_run.sh"
one() {  # task lr epochs init seed: one cell's run
    local init=$CKPT
    [ "$4" = pretrained ] || init=random:$CKPT
    finetune_run "$OUT/$1-lr$2-ep$3-$4-$5" "$init" classification "$DATA/$1_train" "$DATA/$1_dev" "$3" "$5" "$2" 1 \
        "$PRECISION"
}
failed=0 cells=()  # this call's cells: the report reads these, not another call's left in OUT
for t in $TASKS; do
    spec=${EPOCHS#*"$t":}; spec=${spec%% *}
    for e in ${spec//,/ }; do for lr in $LRS; do for s in $SEEDS; do for i in pretrained random; do
        while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || failed=1; done
        one "$t" "$lr" "$e" "$i" "$s" &
        cells+=("$t-lr$lr-ep$e-$i-$s")
    done; done; done; done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
[ "$failed" -eq 0 ] || { echo "Error: some runs failed (their logs are in $OUT)" >&2; exit 1; }
python3 "$HERE/finetune_sweep_report.py" "$OUT" --cells "${cells[@]}"
