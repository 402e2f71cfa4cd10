# Sourced by scripts/recipes/pretraining_gain.sh and scripts/recipes/finetune_sweep.sh: the recipe's fine-tuning
# run, its fixed settings in one place (batch 32, 10% warm-up, dropout 0.1, mean pooling: a sentence head on
# the mean of the last layer, since an MLM-only encoder never trained the pooler), one thread (the two runs of
# a pair go side by side), skipped when OUT/done holds the key of what made it (finetune_key: the settings and
# the init's and data's content), so a rerun into the same folder with another checkpoint runs again.
finetune_run() {  # out init kind train_data eval_data epochs seed lr layer_decay precision
    local out=$1 key
    key=$(finetune_key "$@")
    [ -f "$out/done" ] && [ "$(cat "$out/done")" = "$key" ] && return 0
    OMP_NUM_THREADS=1 berttrain finetune --init "$2" --task "$3" --train-data "$4" --eval-data "$5" \
        --output "$out" --overwrite --epochs "$6" --seed "$7" --lr "$8" --batch-size 32 --dropout 0.1 \
        --warmup-ratio 0.1 --pooling mean --layer-decay "$9" --log-every 100 --precision "${10}" --no-tensorboard \
        > "$out.log" 2>&1 && echo "$key" > "$out/done" ||
        { echo "Error: fine-tuning $out failed, see $out.log" >&2; return 1; }
}
finetune_key() {  # finetune_run's arguments -> one line: the settings, then a digest of the init's and data's files
    local init=${2#random:} dir what
    what=$([[ $2 == random:* ]] && echo random || echo init)  # the paths are not in it: a carried folder is the same
    [ -d "$init" ] || what+=":$init"  # random:PRESET
    for dir in "$init" "$4" "$5"; do
        [ -d "$dir" ] || continue
        # every file's name and size, the content of the small ones (manifests, configs, state) and the last
        # MiB of the large ones (weights: different training ends in different values; a copy keeps them)
        find -L "$dir" -type f -printf '%s %P\n' | LC_ALL=C sort -k2 | while read -r size name; do
            echo "$size $name"
            if [ "$size" -le 1048576 ]; then sha256sum < "$dir/$name"; else tail -c 1048576 "$dir/$name" | sha256sum; fi
        done
    done | sha256sum | { read -r digest _; echo "$what $3 ${*:6} $digest"; }
}
