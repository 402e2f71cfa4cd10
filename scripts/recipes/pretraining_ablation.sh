#!/usr/bin/env bash
# Which lever of the pretraining recipe pays, each measured at the same budget of pretraining time: every arm
# pretrains for BUDGET minutes of this machine's quiet cores, then fine-tunes on TASKS with SEEDS.
#
#   scripts/recipes/pretraining_ablation.sh OUT
#
# The budget is turned into steps per arm from its own throughput (pretraining_gain.sh's MINUTES: CALIB_STEPS
# steps of the arm at each of its lengths, evaluation excluded), measured for every arm first, on quiet cores:
# an arm that steps faster (shorter sequences, a smaller batch, fewer masked positions) gets more steps, and the
# arms can then run while the machine does other work without the comparison changing. The random-init
# baseline is the same architecture for every arm, so it is fine-tuned once (arm "base"). OUT/ablation.json and a table on stdout; resumable like scripts/recipes/pretraining_gain.sh.
#
# Settings: scripts/recipes/configs/pretraining_ablation.env holds each one's default and what it does; a file of
# your own overrides them (CONFIG=my.env scripts/recipes/pretraining_ablation.sh OUT), the environment overrides
# both. STOP_AFTER=steps ends once every arm's steps are measured, so the arms can be run elsewhere, e.g. on a
# GPU in fp32, at this machine's budget: carry OUT, and a later call without it trains what is not done yet.
set -euo pipefail
OUT=${1:?usage: scripts/recipes/pretraining_ablation.sh OUT}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/config.sh"
load_config pretraining_ablation
STOP_AFTER=${STOP_AFTER:-}
# What each arm's pretraining_gain.sh gets from here; CONFIG is this recipe's file, not one of its settings.
export SEEDS TASKS SHARED
unset CONFIG
GAIN=$HERE/pretraining_gain.sh
say() { echo "[pretraining_ablation] $*" >&2; }

# What each arm changes from the base (BERT's settings as the last round's recipe had them: masking 0.2, linear
# decay, batch 64, length 128), pinned here since scripts/recipes/pretraining_gain.sh's defaults are now the
# levers this ablation kept; "recipe" is those levers together, as that script runs them.
# Fine-tuning as the README's table ran it (SST-2 3 epochs; the recipe now fine-tunes it for 6).
BASE="MLM_PROB=0.2 LR_SCHEDULE=linear BATCH=64 SHORT_STEPS=0 FT_EPOCHS=sst2:3,mrpc:5,conll:3,squad:2"
settings() {
    case $1 in
        base) echo "$BASE" ;;
        layerdecay) echo "$BASE LAYER_DECAY=0.8" ;;
        mlm15) echo "$BASE MLM_PROB=0.15" ;;
        mlm30) echo "$BASE MLM_PROB=0.3" ;;
        mlm40) echo "$BASE MLM_PROB=0.4" ;;
        wsd) echo "$BASE LR_SCHEDULE=wsd" ;;
        batch32) echo "$BASE BATCH=32" ;;
        batch128) echo "$BASE BATCH=128" ;;
        len64) echo "$BASE SHORT_STEPS=1" ;;  # two phases: 70% of the budget at length 64, 30% at 128
        recipe) echo "$BASE MLM_PROB=0.4 LR_SCHEDULE=wsd SHORT_STEPS=1" ;;  # the kept levers, together
        *) echo "Error: unknown arm $1" >&2; exit 2 ;;
    esac
}

# Every input before any work: a mistyped arm would otherwise run as the default recipe under its name.
for arm in $ARMS; do settings "$arm" > /dev/null; done
[[ $BUDGET =~ ^[0-9]+([.][0-9]+)?$ ]] && [[ $BUDGET =~ [1-9] ]] ||
    { echo "Error: BUDGET must be a positive number of minutes, got '$BUDGET'" >&2; exit 2; }
[[ $CALIB_STEPS =~ ^[1-9][0-9]*$ ]] || { echo "Error: CALIB_STEPS must be a positive whole number, got '$CALIB_STEPS'" >&2; exit 2; }
case $STOP_AFTER in "" | steps) ;; *) echo "Error: STOP_AFTER must be empty or steps, got '$STOP_AFTER'" >&2; exit 2 ;; esac
for s in $SEEDS; do [[ $s =~ ^[0-9]+$ ]] || { echo "Error: SEEDS must be whole numbers, got '$SEEDS'" >&2; exit 2; }; done
for t in $TASKS; do
    case $t in sst2 | conll | mrpc | squad) ;; *) echo "Error: TASKS must be among: sst2 conll mrpc squad; got '$TASKS'" >&2; exit 2 ;; esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# --- 1. the data, once; every arm links it ----------------------------------------------------------------
[ -f "$OUT/data/tasks64/manifest.json" ] && [ -d "$OUT/data/tasks_data/squad_dev" ] ||
    SHORT_STEPS=1 STOP_AFTER=data "$GAIN" "$OUT/data"
link() {  # folder: the arm's folder with the shared data in it
    mkdir -p "$1"
    for d in text vocab general tasks eval general64 tasks64 tasks_data prep_minutes; do
        ln -sfn "$OUT/data/$d" "$1/$d"
    done
}

# --- 2. each arm's steps, from its own throughput on quiet cores (pretraining_gain.sh's MINUTES) -------------
# All arms are measured before any arm trains, so the arms can then run while the machine does other work.
run_arm() {  # arm [VAR=value...]: pretraining_gain.sh on the arm's folder with its settings and the budget
    local arm=$1; shift
    env $(settings "$arm") MINUTES="$BUDGET" CALIB_STEPS="$CALIB_STEPS" CURVE_STEPS= "$@" "$GAIN" "$OUT/arm-$arm"
}
for arm in $ARMS; do
    [ "$arm" != layerdecay ] || continue  # base's checkpoint, base's steps
    link "$OUT/arm-$arm"
    run_arm "$arm" STOP_AFTER=steps > "$OUT/arm-$arm.log" 2>&1 ||
        { echo "Error: measuring arm $arm failed, see $OUT/arm-$arm.log" >&2; exit 1; }
    read -r steps short < "$OUT/arm-$arm/steps"
    say "$arm: $steps steps in $BUDGET minutes, $short of them at length 64"
done
[ "$STOP_AFTER" != steps ] || exit 0

# --- 3. the arms ---------------------------------------------------------------------------------------------
for arm in $ARMS; do
    dir=$OUT/arm-$arm
    link "$dir"
    inits="pretrained"
    if [ "$arm" = layerdecay ]; then  # the base arm's checkpoint, fine-tuned with ELECTRA's layer-wise rates
        [ -f "$OUT/arm-base/pretrain_minutes" ] ||
            { echo "Error: arm layerdecay fine-tunes arm base's checkpoint: run arm base first" >&2; exit 2; }
        ln -sfn "$OUT/arm-base/pretrain" "$dir/pretrain"
        cp "$OUT/arm-base/pretrain_minutes" "$OUT/arm-base/steps" "$dir/"
    fi
    [ "$arm" != base ] && [ "$arm" != layerdecay ] || inits="pretrained random"
    run_arm "$arm" INITS="$inits" STOP_AFTER= >> "$dir.log" 2>&1 || { echo "Error: arm $arm failed, see $dir.log" >&2; exit 1; }
    say "$arm: done"
done

# --- 4. the table ------------------------------------------------------------------------------------------
python3 "$HERE/pretraining_ablation_report.py" "$OUT" --budget "$BUDGET" --arms $ARMS
