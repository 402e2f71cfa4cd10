#!/usr/bin/env bash
# The README's fine-tuning table: SST-2, MRPC, CoNLL-2003 and SQuAD from (a) the mini BERT of
# scripts/recipes/pretrain_mini.sh and (b) the same architecture randomly initialised, same hyper-parameters.
# Needs ../shared/data and RUNS/mini (default ./runs/mini). Each run takes 10 minutes or less on 2 cores
# (SQuAD: one epoch of 10,675 windows of 256 tokens, 9 minutes).
set -euo pipefail
T=${SHARED:-../shared/data}/tasks
R=${RUNS:-runs}
V=$R/mini/vocab/vocab.txt
PRE=$R/mini/run
D=$R/tasks
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p "$D/raw"

# Task data (the mini vocabulary): SST-2 first 10,000 training rows, full dev; MRPC full; CoNLL first 5,000
# training sentences, full validation; SQuAD dev articles 0-39 to train, 40-47 to evaluate.
head -n 10001 "$T/sst2/train.tsv" > "$D/raw/sst2_train_10k.tsv"
python3 "$(dirname "$0")/conll_head.py" "$T/conll2003/train.txt" "$D/raw/conll_train_5k.txt" 5000
task() { bertprep task "$@" --vocab "$V" --overwrite > /dev/null; }
task classification --glue sst2 --input "$D/raw/sst2_train_10k.tsv" --split train --output "$D/sst2_train"
task classification --glue sst2 --input "$T/sst2/dev.tsv" --output "$D/sst2_dev"
task classification --glue mrpc --input "$T/mrpc/train.tsv" --output "$D/mrpc_train"
task classification --glue mrpc --input "$T/mrpc/dev.tsv" --output "$D/mrpc_dev"
task ner --input "$D/raw/conll_train_5k.txt" --split train --output "$D/conll_train"
task ner --input "$T/conll2003/valid.txt" --label-set-from "$D/conll_train" --output "$D/conll_valid"
task squad --input "$T/squad_v1.1/dev-v1.1.json" --articles 0:40 --split train --max-seq-length 256 --output "$D/squad_train"
task squad --input "$T/squad_v1.1/dev-v1.1.json" --articles 40:48 --split dev --max-seq-length 256 --output "$D/squad_dev"

ft() {  # name kind train eval epochs
    for init in pretrained random; do
        src=$PRE; [ "$init" = random ] && src=random:mini
        berttrain finetune --task "$2" --train-data "$D/$3" --eval-data "$D/$4" --init "$src" \
            --output "$R/finetune/$1-$init" --overwrite --epochs "$5" --lr 3e-4 --batch-size 32 --dropout 0.1 --log-every 100 \
            --precision bf16  # autocast on this CPU: ~1.7x faster steps
    done
}
ft sst2 classification sst2_train sst2_dev 3
ft mrpc classification mrpc_train mrpc_dev 3
ft conll ner conll_train conll_valid 3
ft squad squad squad_train squad_dev 1

python3 - "$R/finetune" <<'PY'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
print("| task | metrics | pretrained mini | random mini |\n|---|---|---|---|")
for name in ("sst2", "mrpc", "conll", "squad"):
    best = {i: json.loads((root / f"{name}-{i}" / "results.json").read_text())["best"] for i in ("pretrained", "random")}
    keys = [k for k in ("accuracy", "f1", "mcc", "exact_match", "pearson", "spearman") if k in best["pretrained"]["eval"]]
    cell = lambda b: " / ".join(f"{b['eval'][k]:.3f}" if b["eval"][k] < 1.5 else f"{b['eval'][k]:.1f}" for k in keys)
    print(f"| {name} | {' / '.join(keys)} | {cell(best['pretrained'])} | {cell(best['random'])} |")
PY
