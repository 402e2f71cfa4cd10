#!/usr/bin/env bash
# Which lever of the pretraining recipe pays, each measured at the same budget of pretraining time: every arm
# pretrains for BUDGET minutes of this machine's quiet cores, then fine-tunes on TASKS with SEEDS.
#
#   scripts/recipes/pretraining_ablation.sh OUT
#
# The budget is turned into steps per arm from its own throughput, measured first on quiet cores (CALIB_STEPS
# steps of each arm, evaluation excluded): an arm that steps faster (shorter sequences, a smaller batch, fewer
# masked positions) gets more steps, and the arms can then run while the machine does other work without the
# comparison changing. The random-init baseline is the same architecture for every arm, so it is fine-tuned
# once (arm "base"). OUT/ablation.json and a table on stdout; resumable like scripts/recipes/pretraining_gain.sh.
#
# Environment: BUDGET (20), SEEDS ("1 2 3"), TASKS ("sst2 mrpc"), CALIB_STEPS (200), ARMS (all, in this order:
# base mlm15 mlm30 mlm40 wsd batch32 batch128 len64 layerdecay recipe), SHARED.
set -euo pipefail
OUT=${1:?usage: scripts/recipes/pretraining_ablation.sh OUT}
BUDGET=${BUDGET:-20}
CALIB_STEPS=${CALIB_STEPS:-200}
export SEEDS=${SEEDS:-1 2 3}
export TASKS=${TASKS:-sst2 mrpc}
ARMS=${ARMS:-base mlm15 mlm30 mlm40 wsd batch32 batch128 len64 layerdecay recipe}
HERE=$(cd "$(dirname "$0")" && pwd)
GAIN=$HERE/pretraining_gain.sh
say() { echo "[pretraining_ablation] $*" >&2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# What each arm changes from the base (BERT's settings as the last round's recipe had them: masking 0.2, linear
# decay, batch 64, length 128), pinned here since scripts/recipes/pretraining_gain.sh's defaults are now the
# levers this ablation kept; "recipe" is those levers together, as that script runs them.
BASE="MLM_PROB=0.2 LR_SCHEDULE=linear BATCH=64 SHORT_STEPS=0"
settings() {
    case $1 in
        base | layerdecay) echo "$BASE" ;;
        mlm15) echo "$BASE MLM_PROB=0.15" ;;
        mlm30) echo "$BASE MLM_PROB=0.3" ;;
        mlm40) echo "$BASE MLM_PROB=0.4" ;;
        wsd) echo "$BASE LR_SCHEDULE=wsd" ;;
        batch32) echo "$BASE BATCH=32" ;;
        batch128) echo "$BASE BATCH=128" ;;
        len64) echo "$BASE" ;;  # its steps split in the run below
        recipe) echo "$BASE MLM_PROB=0.4 LR_SCHEDULE=wsd" ;;  # and split like len64's
        *) echo "Error: unknown arm $1" >&2; exit 2 ;;
    esac
}

# --- 1. the data, once; every arm links it ----------------------------------------------------------------
[ -f "$OUT/data/tasks64/manifest.json" ] && [ -d "$OUT/data/tasks_data/squad_dev" ] ||
    SHORT_STEPS=1 STOP_AFTER=data "$GAIN" "$OUT/data"
link() {  # folder: the arm's folder with the shared data in it
    mkdir -p "$1"
    for d in text vocab general tasks eval general64 tasks64 tasks_data; do ln -sfn "$OUT/data/$d" "$1/$d"; done
}

# --- 2. each arm's throughput on quiet cores ---------------------------------------------------------------
rate() { python3 "$HERE/train_rate.py" "$1/metrics.jsonl"; }  # run folder -> training sequences/s
calibrate() {  # arm -> OUT/calib/ARM/rate (sequences/s), and rate64 for len64
    local arm=$1 dir=$OUT/calib/$1
    [ -f "$dir/rate" ] && return 0
    link "$dir"
    if [ "$arm" = len64 ] || [ "$arm" = recipe ]; then
        env $(settings "$arm") SHORT_STEPS="$CALIB_STEPS" STEPS=$((CALIB_STEPS + 1)) STOP_AFTER=pretrain \
            EVAL_EVERY=1000000 LOG_EVERY=20 CURVE_STEPS= "$GAIN" "$dir" >/dev/null
        rate "$dir/pretrain64" > "$dir/rate"
    else
        env $(settings "$arm") STEPS="$CALIB_STEPS" STOP_AFTER=pretrain EVAL_EVERY=1000000 LOG_EVERY=20 CURVE_STEPS= \
            "$GAIN" "$dir" >/dev/null
        rate "$dir/pretrain" > "$dir/rate"
    fi
    say "$arm: $(cat "$dir/rate") sequences/s"
}
for arm in $ARMS; do [ "$arm" = layerdecay ] || calibrate "$arm"; done

# --- 3. the arms ---------------------------------------------------------------------------------------------
batch_of() { local b; b=$(settings "$1" | sed -n 's/.*BATCH=\([0-9]*\).*/\1/p'); echo "${b:-64}"; }
steps_for() {  # arm -> steps in BUDGET minutes at its rate
    python3 -c "print(round($BUDGET * 60 * $(cat "$OUT/calib/$1/rate") / $(batch_of "$1")))"
}
for arm in $ARMS; do
    dir=$OUT/arm-$arm
    link "$dir"
    inits="pretrained"
    [ "$arm" != base ] || inits="pretrained random"
    case $arm in
        layerdecay)  # the base arm's checkpoint, fine-tuned with ELECTRA's layer-wise rates
            steps=$(steps_for base)
            extra="$BASE LAYER_DECAY=0.8"
            mkdir -p "$dir"
            ln -sfn "$OUT/arm-base/pretrain" "$dir/pretrain"
            cp "$OUT/arm-base/pretrain_minutes" "$dir/pretrain_minutes"
            inits="pretrained random" ;;
        len64 | recipe)  # 70% of the budget at length 64, then 30% at 128 (BERT's two phases)
            long_rate=$OUT/calib/base/rate  # phase two steps at the rate of the same settings at 128
            [ "$arm" = len64 ] || { calibrate mlm40; long_rate=$OUT/calib/mlm40/rate; }
            short=$(python3 -c "print(round(0.7 * $BUDGET * 60 * $(cat "$OUT/calib/$arm/rate") / 64))")
            long=$(python3 -c "print(round(0.3 * $BUDGET * 60 * $(cat "$long_rate") / 64))")
            steps=$((short + long))
            extra="$(settings "$arm") SHORT_STEPS=$short" ;;
        *)
            steps=$(steps_for "$arm")
            extra=$(settings "$arm") ;;
    esac
    say "$arm: $steps steps ($extra)"
    env $extra STEPS="$steps" INITS="$inits" CURVE_STEPS= "$GAIN" "$dir" > "$dir.log" 2>&1 ||
        { echo "Error: arm $arm failed, see $dir.log" >&2; exit 1; }
    say "$arm: done"
done

# --- 4. the table ------------------------------------------------------------------------------------------
python3 "$HERE/pretraining_ablation_report.py" "$OUT" --budget "$BUDGET" --arms $ARMS
