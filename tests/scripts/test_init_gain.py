"""The demo prints the random-init fine-tuning figure beside the pretrained one (issue 54), from both runs'
results.json."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "recipes" / "init_gain.py"
DEMO = REPO / "scripts" / "recipes" / "demo.sh"


def run_with(folder, value: float):
    folder.mkdir()
    best = {"epoch": 2, "step": 126, "metric": "accuracy", "value": value, "eval": {"accuracy": value}}
    (folder / "results.json").write_text(json.dumps({"best": best, "epochs": []}))
    return folder


def test_both_figures_and_which_won(tmp_path):
    ours, theirs = run_with(tmp_path / "ft", 0.601), run_with(tmp_path / "ft_random", 0.765)
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(ours), str(theirs), "--task", "SST-2"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "SST-2 dev accuracy: pretrained 0.601, random init 0.765" in out.stdout
    assert "-0.164, pretraining did not pay at this size" in out.stdout


def test_the_demo_fine_tunes_from_random_weights_with_the_same_settings():
    text = DEMO.read_text()
    # One function runs both fine-tunings, so their settings cannot drift apart.
    assert text.count("berttrain finetune ") == 1
    assert 'finetune "$CKPT" "$OUT/finetune"' in text and 'finetune "random:$CKPT" "$OUT/finetune_random"' in text
    assert "init_gain.py" in text and 'echo "$GAIN"' in text
    assert "export OMP_NUM_THREADS" not in text  # berttrain chooses its threads
