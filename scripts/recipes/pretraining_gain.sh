#!/usr/bin/env bash
# Does pretraining pay off? One command: pretrain a BERT-tiny on this machine's budget, then fine-tune it and
# the same architecture randomly initialised, with identical settings and several seeds, on SST-2, CoNLL-2003,
# MRPC and SQuAD; write OUT/results.json and the curve of downstream score against pretraining time.
#
#   scripts/recipes/pretraining_gain.sh OUT
#
# The recipe (docs/results.md, "Pretraining that pays off", says what each part gained):
# - task-adaptive pretraining (Gururangan et al. 2020): the tasks' own training text, labels removed
#   (scripts/task_text.py), mixed 0.6/0.4 with Wikipedia and the Gutenberg books (--data DIR:WEIGHT);
# - a small vocabulary (8,000 WordPieces) trained on that mixture: a cheaper output layer, fewer rare rows;
# - the budget recipes of Cramming and 24hBERT: pre-LN, no NSP, dynamic masking, no dropout, lr 3e-3 (which
#   pre-LN holds), bf16 autocast where the CPU has it, batch 64;
# - what the ablation (scripts/recipes/pretraining_ablation.sh, each lever at the same minutes) kept: BERT's two
#   phases (70% of the time at length 64, then 128 from those weights: the short phase steps 2.4x faster and
#   is what gets the model out of the MLM plateau), masking 0.4 (Wettig et al. 2023) and a warm-up-stable-decay
#   schedule in each phase;
# - fine-tuning that keeps what pretraining learnt: sentence heads on the mean of the last layer (an MLM-only
#   encoder never trained the pooler nor its last [CLS] state), the same for the random baseline, which is the
#   checkpoint's own architecture freshly initialised (--init random:CHECKPOINT).
# Every stage is skipped when its output is complete, so a killed run continues where it stopped; OUT keeps
# one recipe: a second call with other settings is refused.
#
# Settings: scripts/recipes/configs/pretraining_gain.env holds each one's default and what it does; a file of
# your own overrides them (CONFIG=my.env scripts/recipes/pretraining_gain.sh OUT), the environment overrides
# both (STEPS=2000 scripts/recipes/pretraining_gain.sh OUT).
# Data prepared once (OUT/prep_minutes written) is not prepared again and SHARED is then not read, so a folder
# of data made here can be carried to a machine without the shared corpus (a GPU box) and run there.
set -euo pipefail
OUT=${1:?usage: scripts/recipes/pretraining_gain.sh OUT}
[ $# -eq 1 ] || { echo "Error: scripts/recipes/pretraining_gain.sh takes one argument, the output folder" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/config.sh"
load_config pretraining_gain CURVE_STEPS
FT_EPOCHS=${FT_EPOCHS//,/ }  # commas or spaces
# Defaults computed from other settings (configs/pretraining_gain.env leaves them empty).
MINUTES=${MINUTES:-} STOP_AFTER=${STOP_AFTER:-} ONLY=${ONLY:-} REFERENCE=${REFERENCE:-} PRECISION=${PRECISION:-}
case $ONLY in "" | reference) ;; *) echo "Error: ONLY must be empty or reference, got $ONLY" >&2; exit 2 ;; esac
[ -z "$ONLY" ] || [ -n "$REFERENCE" ] || { echo "Error: ONLY=reference needs REFERENCE" >&2; exit 2; }
CONTINUE_STEPS=${CONTINUE_STEPS:-$([ -n "$REFERENCE" ] && echo 450 || echo 0)}
REFERENCE_TASKS=${REFERENCE_TASKS-$TASKS}  # set and empty: no upper-reference runs
for t in $TASKS ${REFERENCE:+$REFERENCE_TASKS} $CURVE_TASK; do
    [[ " $FT_EPOCHS " =~ \ $t:[1-9][0-9]*\  ]] || { echo "Error: FT_EPOCHS has no epochs for task $t (FT_EPOCHS=$FT_EPOCHS)" >&2; exit 2; }
done
COUNTS_ONLY=$([ "$STOP_AFTER" != data ] || echo 1) check_processes FT_PARALLEL PRETRAIN_WORKERS
for v in CALIB_STEPS GENERAL_DUPE TASK_DUPE CHECKPOINT_EVERY ${MINUTES:+MINUTES}; do
    [[ ${!v} =~ ^[0-9]+([.][0-9]+)?$ ]] && [ "${!v}" != 0 ] ||
        { echo "Error: $v must be a positive number, got '${!v}'" >&2; exit 2; }
done
# Every other setting before any work (a bad one would otherwise fail after a phase of training).
whole() {  # NAME...: each word of each variable a whole number (>= MIN, default 1)
    local v w
    for v; do for w in ${!v}; do
        [[ $w =~ ^[0-9]+$ ]] && [ "$((10#$w))" -ge "${MIN:-1}" ] ||
            { echo "Error: $v must be whole numbers >= ${MIN:-1}, got '${!v}'" >&2; exit 2; }
    done; done
}
whole STEPS BATCH SEEDS CURVE_STEPS CONTINUE_BATCH CONTINUE_EPOCHS EVAL_EVERY LOG_EVERY PRETRAIN_THREADS
MIN=0 whole SHORT_STEPS WARMUP CONTINUE_STEPS
[ -n "$MINUTES" ] || [ "$SHORT_STEPS" -lt "$STEPS" ] ||
    { echo "Error: SHORT_STEPS ($SHORT_STEPS) must be less than STEPS ($STEPS): the second phase needs steps" >&2; exit 2; }
check_numbers 0 1 LR FT_LR CONTINUE_LR LAYER_DECAY
check_numbers 0 0.999999 MLM_PROB
choose() {  # NAME CHOICE...: each word of NAME one of the choices
    local v=$1 w; shift
    for w in ${!v}; do
        [[ " $* " == *" $w "* ]] || { echo "Error: $v must be among: $*; got '${!v}'" >&2; exit 2; }
    done
}
choose NORM pre post
choose LR_SCHEDULE wsd linear
choose INITS pretrained random
choose STOP_AFTER data steps pretrain
choose TASKS sst2 conll mrpc squad
choose CURVE_TASK sst2 conll mrpc squad
choose CONTINUE_TASKS sst2 conll mrpc squad
[ -z "$PRECISION" ] || choose PRECISION fp32 bf16 auto
choose MODEL tiny mini small medium base large
# bf16 autocast only where the CPU computes bf16 natively (AVX512-BF16, AMX): 1.75x fp32 there; emulated
# elsewhere, it is several times slower than fp32 (an AVX2-only EPYC: 0.1 steps/s against ~3).
if [ -z "$PRECISION" ]; then
    PRECISION=fp32
    grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && PRECISION=bf16
fi
# Prepared data (and the reference's, when there is one) is complete: stage 1 and SHARED are not needed.
data_ready() { [ -f "$OUT/prep_minutes" ] && { [ -z "$REFERENCE" ] || [ -f "$OUT/reference_data/done" ]; }; }
if ! data_ready; then
    for d in "$SHARED/pretrain/wikipedia" "$SHARED/pretrain/gutenberg" "$SHARED/tasks"; do
        [ -d "$d" ] || { echo "Error: $d not found (set SHARED to the shared data folder)" >&2; exit 2; }
    done
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: the calibration runs link its folders from their own
steps_setting=$STEPS short_setting=$SHORT_STEPS  # MINUTES: the steps follow from the budget, measured here
[ -z "$MINUTES" ] || { steps_setting=minutes:$MINUTES:$CALIB_STEPS; [ "$SHORT_STEPS" -eq 0 ] || short_setting=0.7; }
settings="steps=$steps_setting model=$MODEL norm=$NORM lr=$LR ft_lr=$FT_LR seeds=$SEEDS tasks=$TASKS mlm=$MLM_PROB"
settings+=" schedule=$LR_SCHEDULE batch=$BATCH warmup=$WARMUP short_steps=$short_setting"
settings+=" layer_decay=$LAYER_DECAY ft_epochs=${FT_EPOCHS// /,}"
settings+=" precision=$PRECISION continue=$CONTINUE_STEPS:$CONTINUE_LR:$CONTINUE_BATCH"
[ "$CONTINUE_STEPS" -eq 0 ] || settings+=":$CONTINUE_EPOCHS reference_tasks=$REFERENCE_TASKS"
[ "$GENERAL_DUPE:$TASK_DUPE" = 3:5 ] || settings+=" dupe=$GENERAL_DUPE:$TASK_DUPE"
if [ -f "$OUT/recipe.txt" ] && [ "$(cat "$OUT/recipe.txt")" != "$settings" ]; then
    echo "Error: $OUT holds a recipe run with other settings ($(cat "$OUT/recipe.txt")); use another folder" >&2
    exit 2
fi
echo "$settings" > "$OUT/recipe.txt"
S=$SHARED/pretrain
T=$SHARED/tasks
stamp() { date +%s; }
say() { echo "[pretraining_gain] $*" >&2; }

# --- 1. text, vocabulary, shards ---------------------------------------------------------------------------
if ! data_ready; then
t0=$(stamp)
python3 "$HERE/task_text.py" "$T" "$OUT/text" --squad-articles 0:40
X=$OUT/text
GENERAL=(--input "wikiextractor:$S/wikipedia/wiki_0*" --input "wikiextractor:$S/wikipedia/wiki_1[0-4]"
         --input "text:$S/gutenberg/*.txt")  # wiki_15 is held out for the MLM evaluation
TASK_TEXT=(--input "sentences:$X/sst2.txt" --input "sentences:$X/conll.txt" --input "sentences:$X/mrpc.txt"
           --input "lines:$X/squad_contexts.txt" --input "sentences:$X/squad_questions.txt")
[ -f "$OUT/vocab/vocab.txt" ] || bertprep vocab "${GENERAL[@]}" "${TASK_TEXT[@]}" --vocab-size 8000 --output "$OUT/vocab"
V=$OUT/vocab/vocab.txt
shards() {  # name length dupe inputs...
    local name=$1 len=$2 dupe=$3; shift 3
    [ -f "$OUT/$name/manifest.json" ] || bertprep pretraining "$@" --vocab "$V" --output "$OUT/$name" \
        --dupe-factor "$dupe" --max-seq-length "$len" --num-shards 4 --overwrite
}
shards general 128 "$GENERAL_DUPE" "${GENERAL[@]}"
shards tasks 128 "$TASK_DUPE" "${TASK_TEXT[@]}"
shards eval 128 1 --input "wikiextractor:$S/wikipedia/wiki_15"
if [ "$SHORT_STEPS" -gt 0 ]; then  # phase one's shards: twice the sequences at half the length
    shards general64 64 "$GENERAL_DUPE" "${GENERAL[@]}"
    shards tasks64 64 "$TASK_DUPE" "${TASK_TEXT[@]}"
fi

# Task data, tokenized with the recipe's vocabulary: the README's splits (SST-2 first 10,000 training rows and
# the full dev set; MRPC train/dev; CoNLL first 5,000 training sentences and validation; SQuAD dev articles
# 0-39 to train, 40-47 to evaluate).
RAW=$OUT/tasks_data/raw
mkdir -p "$RAW"
head -n 10001 "$T/sst2/train.tsv" > "$RAW/sst2_train_10k.tsv"
python3 "$HERE/conll_head.py" "$T/conll2003/train.txt" "$RAW/conll_train_5k.txt" 5000
task_data() {  # folder vocab: every task's train and eval datasets, tokenized with that vocabulary
    local D=$1 V=$2
    task() {  # name args...
        local name=$1; shift
        [ -f "$D/$name/manifest.json" ] || bertprep task "$@" --vocab "$V" --output "$D/$name" --overwrite > /dev/null
    }
    task sst2_train classification --glue sst2 --input "$RAW/sst2_train_10k.tsv" --split train
    task sst2_dev classification --glue sst2 --input "$T/sst2/dev.tsv"
    task mrpc_train classification --glue mrpc --input "$T/mrpc/train.tsv"
    task mrpc_dev classification --glue mrpc --input "$T/mrpc/dev.tsv"
    task conll_train ner --input "$RAW/conll_train_5k.txt" --split train
    task conll_dev ner --input "$T/conll2003/valid.txt" --label-set-from "$D/conll_train"
    task squad_train squad --input "$T/squad_v1.1/dev-v1.1.json" --articles 0:40 --split train --max-seq-length 256
    task squad_dev squad --input "$T/squad_v1.1/dev-v1.1.json" --articles 40:48 --split dev --max-seq-length 256
}
task_data "$OUT/tasks_data" "$V"
if [ -n "$REFERENCE" ]; then  # the reference's task data, and its continued pretraining's shards
    task_data "$OUT/reference_data" "$REFERENCE/vocab.txt"
    if [ "$CONTINUE_STEPS" -gt 0 ]; then
        RV=$REFERENCE/vocab.txt
        [ -f "$OUT/tasks_ref/manifest.json" ] || bertprep pretraining "${TASK_TEXT[@]}" --vocab "$RV" \
            --output "$OUT/tasks_ref" --dupe-factor 5 --max-seq-length 128 --num-shards 4 --overwrite
        [ -f "$OUT/eval_ref/manifest.json" ] || bertprep pretraining --input "wikiextractor:$S/wikipedia/wiki_15" \
            --vocab "$RV" --output "$OUT/eval_ref" --dupe-factor 1 --max-seq-length 128 --num-shards 1 --overwrite
    fi
    touch "$OUT/reference_data/done"
fi
python3 -c "print(round(($(stamp) - $t0) / 60, 2))" > "$OUT/prep_minutes"
fi
prep_minutes=$(cat "$OUT/prep_minutes")
say "data ready in $prep_minutes minutes"
[ "$STOP_AFTER" != data ] || exit 0

# Fine-tuning, as every stage below runs it: the two runs of a pair side by side, one thread each (small
# matrices gain little from a second thread).
. "$HERE/finetune_run.sh"
ft() {  # out init task kind train eval epochs seed [data folder]
    local D=${9:-$OUT/tasks_data}
    finetune_run "$1" "$2" "$4" "$D/$5" "$D/$6" "$7" "$8" "$FT_LR" "$LAYER_DECAY" "$PRECISION"
}
spec() {  # task -> kind train eval epochs (FT_EPOCHS)
    local e
    for e in $FT_EPOCHS; do [ "${e%%:*}" != "$1" ] || break; done
    case $1 in
        sst2 | mrpc) echo "classification ${1}_train ${1}_dev ${e#*:}" ;;
        conll) echo "ner conll_train conll_dev ${e#*:}" ;;
        squad) echo "squad squad_train squad_dev ${e#*:}" ;;
    esac
}
F=$OUT/finetune
mkdir -p "$F"
slot() {  # wait for a free fine-tuning slot (FT_PARALLEL at a time); each run says its own failure
    while [ "$(jobs -rp | wc -l)" -ge "$FT_PARALLEL" ]; do wait -n || true; done
}
first_seed=${SEEDS%% *}

if [ "$ONLY" != reference ]; then
# --- 2. pretraining ----------------------------------------------------------------------------------------
# Step-bounded (the same run on any machine); checkpoints every 100 steps, of which the curve's are kept.
RUN=$OUT/pretrain
if [ -n "$MINUTES" ]; then
    # MINUTES: this machine's throughput at each length, these settings, then the steps that fill the budget.
    if [ ! -f "$OUT/steps" ]; then
        calibrate() {  # name short_steps steps -> OUT/calib/NAME/rate (sequences/s)
            local dir=$OUT/calib/$1
            if [ ! -f "$dir/rate" ]; then
                mkdir -p "$dir"
                for d in vocab general tasks eval general64 tasks64 tasks_data prep_minutes; do
                    ln -sfn "$OUT/$d" "$dir/$d"
                done
                MINUTES= SHORT_STEPS=$2 STEPS=$3 STOP_AFTER=pretrain EVAL_EVERY=1000000 LOG_EVERY=10 CURVE_STEPS= \
                    CHECKPOINT_EVERY=1000000 REFERENCE= CONTINUE_STEPS=0 "$0" "$dir" > "$dir.log" 2>&1 ||
                    { echo "Error: the $1 calibration failed, see $dir.log" >&2; exit 1; }
                python3 "$HERE/train_rate.py" "$dir/$([ "$2" -gt 0 ] && echo pretrain64 || echo pretrain)/metrics.jsonl" \
                    > "$dir/rate"
            fi
            say "calibration: $(cat "$dir/rate") sequences/s at length $([ "$2" -gt 0 ] && echo 64 || echo 128)"
        }
        calibrate len128 0 "$CALIB_STEPS"
        share() { python3 -c "print(round($1 * $MINUTES * 60 * $(cat "$OUT/calib/$2/rate") / $BATCH))"; }
        if [ "$SHORT_STEPS" -gt 0 ]; then
            calibrate len64 "$CALIB_STEPS" $((CALIB_STEPS + 1))
            short=$(share 0.7 len64) long=$(share 0.3 len128)
        else
            short=0 long=$(share 1 len128)
        fi
        echo "$((short + long)) $short" > "$OUT/steps"
    fi
    read -r STEPS SHORT_STEPS < "$OUT/steps"
    say "$MINUTES minutes: $STEPS steps, $SHORT_STEPS of them at length 64"
fi
[ "$STOP_AFTER" != steps ] || exit 0
curve=()  # the curve's steps: those this run has checkpoints for
for s in $CURVE_STEPS; do [ "$s" -ge "$STEPS" ] || [ $((s % CHECKPOINT_EVERY)) -ne 0 ] || curve+=("$s"); done
CURVE_STEPS=${curve[*]:-}
pretrain() {  # output max-steps warmup data... [-- extra flags]: the recipe's pretraining flags, once
    local out=$1 steps=$2 warmup=$3; shift 3
    OMP_NUM_THREADS=$PRETRAIN_THREADS berttrain pretrain "$@" --eval-data "$OUT/eval" \
        --model "$MODEL" --norm-placement "$NORM" --dropout 0 --output "$out" --batch-size "$BATCH" --lr "$LR" \
        --warmup-steps "$warmup" --lr-schedule "$LR_SCHEDULE" --max-steps "$steps" --log-every "$LOG_EVERY" \
        --eval-every "$EVAL_EVERY" \
        --eval-batches 20 --checkpoint-every "$CHECKPOINT_EVERY" --keep-checkpoints 1000 --num-workers "$PRETRAIN_WORKERS" \
        --precision "$PRECISION" \
        --masking dynamic --mlm-probability "$MLM_PROB" --no-nsp --no-tensorboard
}
if [ ! -f "$OUT/pretrain_minutes" ]; then
    t1=$(stamp)
    if [ "$SHORT_STEPS" -gt 0 ]; then
        # Phase one at length 64, then phase two at 128 from its weights with a fresh optimizer and schedule.
        if [ ! -f "$OUT/pretrain64_minutes" ]; then
            pretrain "$OUT/pretrain64" "$SHORT_STEPS" "$WARMUP" --data "$OUT/general64:0.4" --data "$OUT/tasks64:0.6" \
                --resume auto
            python3 -c "print(round(($(stamp) - $t1) / 60, 2))" > "$OUT/pretrain64_minutes"
        fi
        # phase one's minutes count in the total, also when an earlier call ran it
        t1=$(python3 -c "print($(stamp) - 60 * $(cat "$OUT/pretrain64_minutes"))")
        pretrain "$RUN" $((STEPS - SHORT_STEPS)) 100 --data "$OUT/general:0.4" --data "$OUT/tasks:0.6" \
            --resume "$(printf '%s/pretrain64/checkpoints/step-%07d' "$OUT" "$SHORT_STEPS")" --reset-optimizer --overwrite
    else
        pretrain "$RUN" "$STEPS" "$WARMUP" --data "$OUT/general:0.4" --data "$OUT/tasks:0.6" --resume auto
    fi
    python3 -c "print(round(($(stamp) - $t1) / 60, 2))" > "$OUT/pretrain_minutes"
    # Keep the curve's checkpoints and each phase's last; phase two counts its steps from its own start.
    for c in "$OUT"/pretrain64/checkpoints/step-* "$RUN"/checkpoints/step-*; do
        [ -d "$c" ] || continue
        s=$((10#${c##*step-}))
        case $c in "$RUN"/*) s=$((s + SHORT_STEPS)) ;; esac
        case " $CURVE_STEPS $SHORT_STEPS $STEPS " in *" $s "*) ;; *) rm -rf "$c" ;; esac
    done
fi
say "pretrained in $(cat "$OUT/pretrain_minutes") minutes"
[ "$STOP_AFTER" != pretrain ] || exit 0
ckpt_at() {  # step, counted over both phases -> its checkpoint folder
    if [ "$1" -le "$SHORT_STEPS" ]; then printf '%s/pretrain64/checkpoints/step-%07d' "$OUT" "$1"
    else printf '%s/checkpoints/step-%07d' "$RUN" $(($1 - SHORT_STEPS)); fi
}
LAST=$(ckpt_at "$STEPS")

# --- 3. fine-tuning: pretrained and random, the same settings, each seed -----------------------------------
init_of() { [ "$1" = pretrained ] && echo "$LAST" || echo "random:$LAST"; }
for task in $TASKS; do for seed in $SEEDS; do for init in $INITS; do
    read -r kind train dev epochs <<< "$(spec "$task")"
    slot
    { ft "$F/$task-$init-$seed" "$(init_of "$init")" "$task" "$kind" "$train" "$dev" "$epochs" "$seed" &&
        say "fine-tuned: $task $init $seed"; } &
done; done; done
wait
# The curve: the chosen task from each kept checkpoint (random init is step 0), the first seed.
read -r kind train dev epochs <<< "$(spec "$CURVE_TASK")"
for s in $CURVE_STEPS; do
    slot
    ft "$F/curve-$CURVE_TASK-step$s" "$(ckpt_at "$s")" "$CURVE_TASK" "$kind" "$train" "$dev" "$epochs" "$first_seed" &
done
wait
fi  # ONLY != reference
# The upper reference: one seed per task.
if [ -n "$REFERENCE" ]; then
    for task in $REFERENCE_TASKS; do
        read -r kind train dev epochs <<< "$(spec "$task")"
        slot
        ft "$F/$task-reference-$first_seed" "$REFERENCE" "$task" "$kind" "$train" "$dev" "$epochs" "$first_seed" \
            "$OUT/reference_data" &
    done
    wait
fi

# --- 3c. continued pretraining of the reference (domain- and task-adaptive: Gururangan et al. 2020) -----------
# The published model, its vocabulary, the task text: a few minutes of MLM on it, then the same fine-tuning from
# the model as it is ("before") and from the continued checkpoint ("after").
if [ -n "$REFERENCE" ] && [ "$CONTINUE_STEPS" -gt 0 ]; then
    CONT=$OUT/continued
    if [ ! -f "$OUT/continue_minutes" ]; then
        t2=$(stamp)
        OMP_NUM_THREADS=$PRETRAIN_THREADS berttrain pretrain --init-from "$REFERENCE" --data "$OUT/tasks_ref" \
            --eval-data "$OUT/eval_ref" --output "$CONT" --resume auto --batch-size "$CONTINUE_BATCH" \
            --lr "$CONTINUE_LR" --warmup-steps $((CONTINUE_STEPS / 10)) --max-steps "$CONTINUE_STEPS" --log-every 50 \
            --eval-every 100 --eval-batches 20 --checkpoint-every 100 --keep-checkpoints 1 --num-workers 1 \
            --precision "$PRECISION" --masking dynamic --mlm-probability 0.15 --no-nsp --no-tensorboard
        python3 -c "print(round(($(stamp) - $t2) / 60, 2))" > "$OUT/continue_minutes"
    fi
    CLAST=$(printf '%s/checkpoints/step-%07d' "$CONT" "$CONTINUE_STEPS")
    for task in $CONTINUE_TASKS; do for seed in $SEEDS; do for which in before after; do
        read -r kind train dev epochs <<< "$(spec "$task")"
        init=$REFERENCE
        [ "$which" = before ] || init=$CLAST
        # "before", first seed, the task's own epochs: the very run of the upper reference above (same init,
        # data, settings, seed)
        ref=$F/$task-reference-$seed
        if [ "$which" = before ] && [ "$CONTINUE_EPOCHS" -eq "$epochs" ] && [ -f "$ref/done" ] \
            && [ ! -e "$F/$task-continued-before-$seed" ]; then
            ln -s "$(basename "$ref")" "$F/$task-continued-before-$seed"
            ln -sf "$(basename "$ref").log" "$F/$task-continued-before-$seed.log"
        fi
        slot
        { ft "$F/$task-continued-$which-$seed" "$init" "$task" "$kind" "$train" "$dev" "$CONTINUE_EPOCHS" \
            "$seed" "$OUT/reference_data" && say "fine-tuned: $task continued $which $seed"; } &
    done; done; done
    wait
fi

# --- 4. results.json and the curve (ONLY=reference: the reference's and continued pretraining's alone) -----
[ "$ONLY" != reference ] || TASKS=
python3 "$HERE/pretraining_gain_report.py" "$OUT" --prep-minutes "$prep_minutes" --steps "$STEPS" \
    --short-steps "$SHORT_STEPS" \
    --curve-task "$CURVE_TASK" --curve-steps $CURVE_STEPS --seeds $SEEDS --tasks $TASKS --inits $INITS \
    ${REFERENCE:+--reference "$REFERENCE" --reference-tasks $REFERENCE_TASKS} \
    $( [ -n "$REFERENCE" ] && [ "$CONTINUE_STEPS" -gt 0 ] && echo --continued $CONTINUE_TASKS \
        --continue-steps "$CONTINUE_STEPS" --continue-epochs "$CONTINUE_EPOCHS")
