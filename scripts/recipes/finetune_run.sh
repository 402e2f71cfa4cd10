# Sourced by scripts/recipes/pretraining_gain.sh and scripts/recipes/finetune_sweep.sh: the recipe's fine-tuning
# run, its fixed settings in one place (batch 32, 10% warm-up, dropout 0.1, mean pooling: a sentence head on
# the mean of the last layer, since an MLM-only encoder never trained the pooler), one thread (the two runs of
# a pair go side by side), skipped when OUT/done says it finished.
finetune_run() {  # out init kind train_data eval_data epochs seed lr layer_decay precision
    local out=$1
    [ -f "$out/done" ] && return 0
    OMP_NUM_THREADS=1 berttrain finetune --init "$2" --task "$3" --train-data "$4" --eval-data "$5" \
        --output "$out" --overwrite --epochs "$6" --seed "$7" --lr "$8" --batch-size 32 --dropout 0.1 \
        --warmup-ratio 0.1 --pooling mean --layer-decay "$9" --log-every 100 --precision "${10}" --no-tensorboard \
        > "$out.log" 2>&1 && touch "$out/done" || { echo "Error: fine-tuning $out failed, see $out.log" >&2; return 1; }
}
