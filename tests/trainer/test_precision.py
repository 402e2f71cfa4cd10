"""``--precision fp16``: loss scaling (``torch.amp.GradScaler``) in the shared training step, its state in
checkpoints; fp16 refused on the CPU and bf16 on a GPU without it, in one line. The scaler's arithmetic is
device-independent, so it is tested here with torch's CPU scaler; a GPU run is the device check."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer import runtime as R
from bertstream.trainer.checkpoint_writer import CheckpointWriter
from bertstream.trainer.cli import main
from bertstream.trainer.distributed import DistInfo
from bertstream.trainer.errors import RunError
from bertstream.trainer.model_config import bert_tiny
from bertstream.trainer.optim.schedule import build_scheduler
from bertstream.trainer.training import Diverged, Training

CPU = torch.device("cpu")


def _training(scaled: bool, seed: int = 0) -> Training:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)  # as the optimizer table builds it
    t = Training(model, model, opt, build_scheduler(opt, 0, 100), max_grad_norm=1.0)
    t.scaler = torch.amp.GradScaler("cpu") if scaled else None
    return t


def _step(t: Training, x: torch.Tensor) -> torch.Tensor:
    t.backward(t.model(x).pow(2).mean())
    return t.optimizer_step()


def test_scaled_steps_train_as_unscaled_ones():
    plain, scaled = _training(False), _training(True)
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    for _ in range(5):
        assert _step(plain, x) == pytest.approx(float(_step(scaled, x)), rel=1e-6)  # the norm of the true gradient
    for a, b in zip(plain.raw.parameters(), scaled.raw.parameters()):
        torch.testing.assert_close(a, b)  # a power-of-two scale: the same gradients, bit for bit or nearly
    assert scaled.step == 5 and scaled.skipped == 0


def test_an_overflow_skips_the_step_with_a_halved_scale_and_a_collapse_is_divergence():
    t = _training(True)
    before = [p.detach().clone() for p in t.raw.parameters()]
    t.backward(t.model(torch.full((2, 4), float("inf"))).sum())  # inf/NaN gradients: what fp16 overflow gives
    t.optimizer_step()
    assert (t.step, t.skipped, t.scaler.get_scale()) == (1, 1, 32768.0)
    assert all(torch.equal(a, b) for a, b in zip(before, t.raw.parameters()))  # weights untouched
    t.scaler.update(new_scale=1.0)  # the scale has collapsed: no longer fp16's range, the run diverged
    t.backward(t.model(torch.full((2, 4), float("inf"))).sum())
    with pytest.raises(Diverged, match="training diverged at step 2"):
        t.optimizer_step()


def test_the_loss_scale_is_saved_in_the_checkpoint_and_restored(tmp_path):
    info = DistInfo(rank=0, local_rank=0, world_size=1, device=CPU)
    t = _training(True)
    _step(t, torch.ones(2, 4))
    t.scaler.update(new_scale=1024.0)
    writer = CheckpointWriter({"model": bert_tiny(8).to_dict()}, "[PAD]\n", info)
    path = writer.save(tmp_path, t, {"data": {}})
    assert json.loads((path / "state.json").read_text())["grad_scaler"]["scale"] == 1024.0
    again = _training(True)
    again.restore(ckpt.load(path))
    assert again.scaler.get_scale() == 1024.0 and again.step == 1
    state = json.loads((path / "state.json").read_text())
    state["grad_scaler"]["scale"] = -1.0
    (path / "state.json").write_text(json.dumps(state))
    with pytest.raises(RunError, match=r"damaged loss-scaler state \(grad_scaler.scale -1.0 is not a positive"):
        _training(True).restore(ckpt.load(path))
    fp32 = _training(False)  # a resume in another precision: the scale is not needed
    fp32.restore(ckpt.load(path))
    assert fp32.step == 1


def test_fp16_is_refused_on_the_cpu_and_bf16_on_a_gpu_without_it(monkeypatch):
    with pytest.raises(RunError, match=r"^--precision fp16 needs a CUDA GPU \(this run computes on cpu;"):
        R.check_precision("fp16", CPU)
    R.check_precision("bf16", CPU)  # the CPU has bf16
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    R.has_bf16.cache_clear()
    try:
        with pytest.raises(RunError, match=r"--precision bf16: Tesla T4 has no native bf16 .*use --precision fp16"):
            R.check_precision("bf16", gpu)
        R.check_precision("fp16", gpu)
        assert isinstance(R.autocast(gpu, "auto"), type(R.autocast(CPU, "fp32")))  # auto: fp32 there, not bf16
    finally:
        R.has_bf16.cache_clear()


def test_the_runs_precision_is_resolved_once_from_the_run_section():
    from bertstream.trainer.config import RunConfig

    # the step, both evaluations and the FLOP count take this object; the flag is read in runtime.Precision.of only
    bf16 = R.Precision.of(RunConfig(precision="bf16"), CPU)
    assert (bf16.dtype, bf16.grad_scaler()) == (torch.bfloat16, None)
    with bf16.autocast():
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")
    assert R.Precision.of(RunConfig(), CPU).dtype == torch.float32  # auto on the CPU: fp32
    with pytest.raises(RunError, match=r"^--precision fp16 needs a CUDA GPU"):  # --device auto on a CPU-only host
        R.Precision.of(RunConfig(precision="fp16"), CPU)


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_both_commands_refuse_fp16_on_the_cpu_in_one_line(command, tmp_path):
    args = [command, "--output", str(tmp_path / "run"), "--precision", "fp16", "--device", "cpu"]
    args += ["--data", "x"] if command == "pretrain" else ["--task", "classification"]
    args += [] if command == "pretrain" else ["--train-data", "x", "--eval-data", "x", "--init", "random:tiny"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: Invalid value for '--precision': fp16 needs a CUDA GPU (its loss scaling is for GPUs without bf16): "
        "use fp32 or bf16 with --device cpu"
    )


def test_fp16_on_a_machine_without_a_gpu_is_one_error_line(demo_shards, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: --device auto computes on it")
    args = ["pretrain", "--data", str(demo_shards), "--output", str(tmp_path / "run"), "--precision", "fp16"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1].startswith(
        "Error: --precision fp16 needs a CUDA GPU (this run computes on cpu;"
    )
    assert not (tmp_path / "run" / "checkpoints").exists()
