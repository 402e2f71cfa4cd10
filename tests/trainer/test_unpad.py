"""The unpadded encoder (trainer/unpad.py): the padded path's losses and gradients from real tokens only."""

from __future__ import annotations

import pytest
import torch

from bertstream.trainer.metrics import peak_for_name
from bertstream.trainer.model import BertForPreTraining
from bertstream.trainer.model_config import BertConfig, batch_flops, pretraining_flops
from bertstream.trainer.unpad import QUANTUM, plan, rows


def _batch(lengths: list[int], width: int, predictions: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A padded pretraining batch as the loader makes it: [CLS] A [SEP] B [SEP], masked positions inside."""
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    lens = torch.tensor(lengths)
    mask = (torch.arange(width) < lens[:, None]).long()  # [B, T]
    ids = torch.randint(5, 100, (b, width), generator=g) * mask
    ids[:, 0] = 2  # [CLS]
    types = ((torch.arange(width) >= lens[:, None] // 2) & (mask > 0)).long()
    positions = torch.stack([torch.randperm(n - 1, generator=g)[:predictions] + 1 for n in lengths])
    return {
        "input_ids": ids,
        "token_type_ids": types,
        "attention_mask": mask,
        "masked_lm_positions": positions,
        "masked_lm_ids": torch.randint(0, 100, (b, predictions), generator=g),
        "masked_lm_weights": (torch.arange(predictions) < torch.tensor([predictions, 3, predictions - 1])[:b, None])
        .float()
        .expand(b, predictions)
        .contiguous(),
        "next_sentence_labels": torch.tensor([0, 1, 0])[:b],
    }


def _config(placement: str, dropout: float = 0.0) -> BertConfig:
    return BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        hidden_dropout=dropout,
        attention_dropout=dropout,
        norm_placement=placement,
    )


def _run(model: BertForPreTraining, batch: dict, unpad: bool) -> tuple[dict, dict]:
    model.unpad = unpad
    model.zero_grad()
    out = model(batch)
    (out["mlm_sum"] + out["nsp_sum"]).backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("placement", ["post", "pre"])
@pytest.mark.parametrize("layout", ["loader", "model"])  # index tensors from the loader (unpack) or made inside
@pytest.mark.parametrize("attention", ["each", "dense"])  # the CPU's per-sequence loop; the [B, T] scatter
def test_unpadded_losses_and_grads_equal_the_padded_path(placement, layout, attention, monkeypatch):
    if attention == "dense":  # what torch.compile (and CUDA with attention dropout) takes
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    model = BertForPreTraining(_config(placement), seed=3)
    batch = _batch([40, 11, 27], width=40, predictions=6)
    padded, padded_grads = _run(model, batch, unpad=False)
    unpadded_batch = {**batch, **plan(batch["attention_mask"])} if layout == "loader" else batch
    out, grads = _run(model, unpadded_batch, unpad=True)
    for key in ("mlm_sum", "nsp_sum", "mlm_logits", "nsp_logits", "mlm_correct", "mlm_count", "nsp_correct"):
        torch.testing.assert_close(out[key], padded[key], rtol=1e-5, atol=1e-5, msg=key)
    for name, grad in padded_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    # real tokens alike; slots: B*T padded, the real tokens rounded up past a multiple of the quantum unpadded
    assert float(out["tokens"]) == float(padded["tokens"]) == 78
    assert float(padded["slots"]) == 3 * 40 and float(out["slots"]) == QUANTUM * 2 == rows(78)


def test_dropout_is_drawn_from_the_seed_alone():
    model = BertForPreTraining(_config("post", dropout=0.1), seed=3)
    batch = _batch([40, 11, 27], width=40, predictions=6)
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        runs.append(_run(model, batch, unpad=True)[0]["mlm_sum"].item())
    torch.manual_seed(8)
    other = _run(model, batch, unpad=True)[0]["mlm_sum"].item()
    assert runs[0] == runs[1] != other


def test_plan_places_real_tokens_first_then_filler():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    p = plan(mask, quantum=4)
    assert p["unpad_index"].tolist() == [0, 1, 2, 4, 5, 0, 0, 0]  # 5 real rows, 3 filler rows (read position 0)
    assert p["unpad_inverse"].tolist() == [0, 1, 2, 8, 3, 4, 8, 8]  # padding reads row 8: the zero row
    assert p["cu_seqlens"].tolist() == [0, 3, 5, 8]
    assert rows(8, quantum=4) == 12  # always one filler row at least: the filler is never an empty segment


def test_flops_count_real_tokens_for_mfu_and_computed_positions_for_hfu():
    config = BertConfig(vocab_size=30522)
    full = batch_flops(config, [128, 128], [20, 20], (128, 20), rows=None, varlen=False)
    assert full == (2 * pretraining_flops(config, 128, 20),) * 2  # no padding: one figure
    useful, padded = batch_flops(config, [128, 40], [20, 6], (128, 20), rows=None, varlen=False)
    assert useful == pretraining_flops(config, 128, 20) + pretraining_flops(config, 40, 6)
    assert padded == 2 * pretraining_flops(config, 128, 20)
    _, dense = batch_flops(config, [128, 40], [20, 6], (128, 20), rows=rows(168), varlen=False)
    _, varlen = batch_flops(config, [128, 40], [20, 6], (128, 20), rows=rows(168), varlen=True)
    assert useful < varlen < dense < padded


@pytest.mark.parametrize(
    ("name", "model", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756),
        ("NVIDIA H100 NVL", "H100 NVL", 835),
        ("NVIDIA H200", "H200 SXM", 989),
        ("NVIDIA H200 NVL", "H200 NVL", 835),
        ("NVIDIA GH200 480GB", "GH200", 989),
        ("NVIDIA A100-SXM4-40GB", "A100", 312),
        ("NVIDIA A100 80GB PCIe", "A100", 312),
        ("NVIDIA L4", "L4", 121),
        ("NVIDIA L40S", "L40S", 362),
        ("NVIDIA A10", "A10", 125),
        ("Tesla V100-SXM2-16GB", "V100 SXM2 (fp16)", 125),
        ("Tesla V100-PCIE-32GB", "V100 PCIe (fp16)", 112),
        ("Tesla T4", "T4 (fp16)", 65),
    ],
)
def test_peak_table_tells_the_parts_of_a_chip_apart(name, model, tflops):
    found = peak_for_name(name)
    assert found is not None and found[0] == model and round(found[1] / 1e12) == tflops


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA RTX A4000", "NVIDIA GeForce GTX 1080"])
def test_devices_without_a_published_peak_are_not_guessed(name):
    assert peak_for_name(name) is None  # measured by a matmul on the device instead (metrics.device_peak)


def test_throughput_reports_mfu_over_useful_and_hfu_over_computed_flops():
    from bertstream.trainer.metrics import Throughput

    meter = Throughput(torch.device("cpu"))
    assert meter.peak is None and "mfu" not in meter.read()  # the CPU: no peak, no MFU
    meter.peak, meter.peak_source = 1e12, "table: test"
    meter.add(8, 3000, 2e9, 3e9)
    out = meter.read()
    assert out["hfu"] == pytest.approx(1.5 * out["mfu"]) and out["peak_source"] == "table: test"
