"""A step that does not log reads no tensor into Python (issue 52): the host never waits for the device there.

Counted on CPU, where every tensor read is visible as a call: ``item``, ``tolist``, ``float(t)``, ``int(t)``,
``bool(t)`` (``if t:``), ``numpy``, ``cpu``... made by the project's own code (the calling frame is in the
bertstream package; PyTorch's internals are its own business). Two real runs of the tiny model that log,
evaluate and checkpoint only at their last step differ only by their non-logging steps: their read counts
must be equal."""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import bertstream
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.pretrain.loop import pretrain

ROOT = str(Path(bertstream.__path__[0]))
READS = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__", "__array__")


@contextlib.contextmanager
def counting_reads() -> Iterator[Counter]:
    """Counts, by ``file:line`` of the project's caller, every read of a tensor into Python inside."""
    reads: Counter = Counter()
    saved = {name: torch.Tensor.__dict__.get(name) for name in READS}

    def counted(name: str):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(ROOT):
                reads[f"{caller[len(ROOT) + 1 :]}:{sys._getframe(1).f_lineno} {name}"] += 1
            return original(self, *args, **kwargs)

        return read

    for name in READS:
        setattr(torch.Tensor, name, counted(name))
    try:
        yield reads
    finally:
        for name, original in saved.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)


def run_reads(data: Path, out: Path, steps: int, **kw) -> Counter:
    cfg = TrainConfig.build(
        paths=(str(data),),
        output=str(out),
        batch_size=4,
        max_steps=steps,
        warmup_steps=1,
        log_every=1000,  # the last step logs, evaluates and checkpoints; no other does
        checkpoint_every=1000,
        eval_every=1000,
        num_workers=0,
        tensorboard=False,
        **kw,
    )
    with counting_reads() as reads:
        pretrain(cfg)
    return reads


@pytest.mark.parametrize("kw", [{}, {"grad_accum": 2, "optimizer": "lamb", "max_minutes": 60.0}])
def test_a_step_that_does_not_log_reads_no_tensor(demo_shards, tmp_path, kw):
    one = run_reads(demo_shards, tmp_path / "one", 1, eval_data=str(demo_shards), eval_batches=1, **kw)
    five = run_reads(demo_shards, tmp_path / "five", 5, eval_data=str(demo_shards), eval_batches=1, **kw)
    assert sum(one.values()) > 0  # the log, evaluation and checkpoint of the last step are seen
    extra = five - one  # the reads of 4 non-logging steps
    assert not extra, dict(extra)


def test_eval_batches_are_pinned_on_cuda_as_the_training_batches(demo_shards, tmp_path):
    """The eval loader pins its batches for a CUDA device (its host-to-device copies were synchronous)."""
    from bertstream.trainer import distributed as D
    from bertstream.trainer.pretrain.inputs import data_loader, eval_data_loader, open_data

    cfg = TrainConfig.build(paths=(str(demo_shards),), output=str(tmp_path / "run"), eval_data=str(demo_shards))
    data = open_data(cfg)
    for device, pinned in (("cuda", True), ("cpu", False)):
        info = D.DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device(device))
        assert eval_data_loader(cfg, data, info).config.pin_memory is pinned
        assert data_loader(cfg, data, info).config.pin_memory is pinned


def test_a_compiled_run_does_not_recompile_across_steps_or_at_its_evaluations(tmp_path, monkeypatch):
    """Frames torch.compile traces after step 1 of a real compiled run whose batches change length and masked
    count from one to the next, with evaluations at steps 2, 4 and 6: none (the evaluation graph is compiled
    at start-up, and one dynamic graph serves every shape). Dynamo with the eager backend: the graphs and their
    guards, hence recompilations, are dynamo's; the backend only makes the test cheap."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from benchmarks.lib.synthetic_shards import bert_like_vocab, make_instances, write_dataset
    from bertstream.trainer import peers

    data = tmp_path / "data"
    vocab = bert_like_vocab(1000)
    inst = make_instances(256, seed=1, vocab=vocab, max_len=64, full_fraction=0.2, max_masked=10)
    write_dataset(data, inst, [128, 128], vocab=vocab, rows_per_batch=64, formats=("arrow",))
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real(model, **{**kw, "backend": "eager", "mode": None}))
    torch._dynamo.reset()
    counters.clear()
    after_step_1: list[int] = []
    at_step = peers.at_step

    def noted(step: int) -> None:
        if step == 1:
            after_step_1.append(sum(counters["frames"].values()))
        at_step(step)

    monkeypatch.setattr(peers, "at_step", noted)
    cfg = TrainConfig.build(
        paths=(str(data),),
        output=str(tmp_path / "run"),
        batch_size=2,
        max_steps=6,
        warmup_steps=1,
        log_every=2,
        checkpoint_every=1000,
        eval_data=str(data),
        eval_every=2,
        eval_batches=3,
        num_workers=0,
        tensorboard=False,
        compile=True,
    )
    pretrain(cfg)
    assert after_step_1 and after_step_1[0] > 0
    assert sum(counters["frames"].values()) == after_step_1[0]
