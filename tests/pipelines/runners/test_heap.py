"""Beam's imported objects leave the collector's scans: as Beam is imported after ``bertstream.pipelines``, and
what else is alive before a process's first run; a run's own graph never does (it would be kept for good in a
process that runs many)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# Two small runs in one fresh process: the permanent generation's size before, after the first, after the second.
_TWO_RUNS = """
import gc, json, sys
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.pipeline import run_pretraining
counts = [gc.get_freeze_count()]
for out in sys.argv[3:]:
    job = PretrainingJob(inputs=(sys.argv[1],), vocab=sys.argv[2], output=out,
                         config=PretrainingConfig(input_format="text", num_shards=1))
    run_pretraining(job)
    counts.append(gc.get_freeze_count())
print(json.dumps(counts))
"""


def test_the_first_run_freezes_the_imports_and_a_second_run_freezes_nothing(tmp_path, demo_corpus, demo_vocab):
    text = tmp_path / "in.txt"
    text.write_text(sorted(demo_corpus.glob("*.txt"))[0].read_text(encoding="utf-8")[:4000], encoding="utf-8")
    outs = [str(tmp_path / "a"), str(tmp_path / "b")]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    argv = [sys.executable, "-c", _TWO_RUNS, str(text), str(Path(demo_vocab) / "vocab.txt"), *outs]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, first, second = json.loads(proc.stdout.strip().splitlines()[-1])
    assert first > before + 1_000  # ours and the tokenizer's, imported after Beam
    # Frozen again, the first run's graph would be there: some 15,000 objects (a handful come and go anyway).
    assert abs(second - first) < 1_000


def test_beam_imported_after_bertstream_pipelines_is_frozen_and_the_collector_is_left_as_it_was():
    code = (
        "import gc, json; gc.set_threshold(500, 7, 9); import bertstream.pipelines, apache_beam; "
        "print(json.dumps([gc.get_freeze_count(), gc.get_threshold(), gc.isenabled()]))"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frozen, thresholds, enabled = json.loads(proc.stdout.strip().splitlines()[-1])
    assert frozen > 50_000  # Beam, pyarrow, numpy: what Beam's import made
    assert thresholds == [500, 7, 9] and enabled
