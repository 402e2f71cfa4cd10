from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.kernels import switch
from bertstream.pipelines.pretraining.pipeline import run_pretraining


def test_python_paths_until_the_budget_is_spent_then_the_kernels(monkeypatch):
    monkeypatch.delitem(sys.modules, "numba", raising=False)  # a process that has not started numba
    monkeypatch.delenv(switch.ENV, raising=False)
    monkeypatch.setattr(switch, "_python_seconds", 0.0)
    monkeypatch.setattr(switch, "PYTHON_BUDGET_S", 0.05)
    calls = []
    kernel, python = (lambda x: calls.append("kernel") or x), (lambda x: calls.append("python") or x)
    assert switch.run(kernel, python, 1) == 1 and calls == ["python"]
    monkeypatch.setattr(switch, "_python_seconds", 0.06)  # as if the Python paths had taken that long
    assert switch.run(kernel, python, 2) == 2 and calls == ["python", "kernel"]


def test_once_numba_runs_in_the_process_the_kernels_run_from_the_first_call(monkeypatch):
    import numba  # noqa: F401  (as the segmentation stage's scan starts it)

    monkeypatch.delenv(switch.ENV, raising=False)
    monkeypatch.setattr(switch, "_python_seconds", 0.0)
    calls = []
    kernel, python = (lambda x: calls.append("kernel") or x), (lambda x: calls.append("python") or x)
    assert switch.run(kernel, python, 1) == 1 and calls == ["kernel"]


@pytest.mark.parametrize("mode,expected", [("always", True), ("never", False)])
def test_the_environment_overrides_the_choice(monkeypatch, mode, expected):
    monkeypatch.setattr(switch, "_python_seconds", 0.0)
    monkeypatch.setenv(switch.ENV, mode)
    assert switch.use_kernels() is expected
    monkeypatch.setenv(switch.ENV, "sometimes")
    with pytest.raises(ValueError, match="auto, always or never"):
        switch.use_kernels()


def digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("pretrain-*"))}


def test_kernels_in_beam_worker_processes_write_the_python_paths_shards(tmp_path, monkeypatch, demo_corpus, demo_vocab):
    """End to end: the pure-Python paths in process vs the kernels in two Beam worker subprocesses (which
    import numba and load its cache themselves): byte-identical shards. Whole-word masking (its harder kernel);
    each kernel against its Python path in process is this folder's other tests."""
    whole_word = True
    files = [str(f) for f in sorted(demo_corpus.glob("*.txt"))]
    cfg = PretrainingConfig(input_format="text", dupe_factor=2, num_shards=2, whole_word_mask=whole_word)
    monkeypatch.setenv(switch.ENV, "never")
    python = run_pretraining(
        PretrainingJob(
            inputs=tuple(files), vocab=str(demo_vocab / "vocab.txt"), output=str(tmp_path / "py"), config=cfg
        )
    )
    monkeypatch.setenv(switch.ENV, "always")
    compiled = run_pretraining(
        PretrainingJob(
            inputs=tuple(files),
            vocab=str(demo_vocab / "vocab.txt"),
            output=str(tmp_path / "jit"),
            config=cfg,
            beam_args=("--direct_num_workers=2", "--direct_running_mode=multi_processing"),
        )
    )
    assert digests(tmp_path / "py") == digests(tmp_path / "jit") and len(digests(tmp_path / "py")) == 2
    assert python.manifest.statistics == compiled.manifest.statistics


def test_a_small_run_never_starts_numba(tmp_path, demo_corpus, demo_vocab):
    """A small input's run (in a fresh process, as ``bertprep pretraining`` is) segments and masks on the
    pure-Python paths: numba's import (~0.5 s, ~90 MB) would be most of its start-up. Before issue 54 the
    segmentation scan and the masking kernel always ran compiled and every run imported numba."""
    files = sorted(demo_corpus.glob("*.txt"))[:2]
    code = (
        "import sys\n"
        "from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob\n"
        "from bertstream.pipelines.pretraining.pipeline import run_pretraining\n"
        "cfg = PretrainingConfig(input_format='text', dupe_factor=2, num_shards=1, whole_word_mask=True)\n"
        "r = run_pretraining(PretrainingJob(inputs=tuple(sys.argv[3:]), vocab=sys.argv[1], output=sys.argv[2],"
        " config=cfg))\n"
        "assert r.manifest.statistics['instances'] > 0\n"
        "print('numba' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != switch.ENV}
    argv = [sys.executable, "-c", code, str(demo_vocab / "vocab.txt"), str(tmp_path / "out"), *map(str, files)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "False"
