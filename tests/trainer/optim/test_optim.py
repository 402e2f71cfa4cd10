"""Parameter groups and layer-wise learning-rate decay."""

from __future__ import annotations

import pytest

from bertstream.trainer.config import warmup_note
from bertstream.trainer.finetune.heads import BertForSequenceClassification, BertForTokenClassification
from bertstream.trainer.model import BertForPreTraining
from bertstream.trainer.model_config import bert_mini
from bertstream.trainer.optim.groups import depth
from bertstream.trainer.optim.schedule import build_scheduler
from bertstream.trainer.optim.table import build_optimizer

CONFIG = bert_mini(500)  # 4 layers


def by_name(model, optimizer) -> dict[str, tuple[float, float]]:
    ids = {id(p): n for n, p in model.named_parameters()}
    return {ids[id(p)]: (g["lr"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}


def test_without_decay_the_groups_are_berts_two():
    model = BertForPreTraining(CONFIG)
    opt = build_optimizer(model, "adamw", 1e-3, 0.01)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert {g["lr"] for g in opt.param_groups} == {1e-3}
    got = by_name(model, opt)
    assert len(got) == len(list(model.parameters()))
    assert got["bert.encoder.layer.0.attention.self.query.weight"] == (1e-3, 0.01)
    assert got["bert.encoder.layer.0.attention.output.LayerNorm.weight"] == (1e-3, 0.0)
    assert got["bert.embeddings.word_embeddings.weight"] == (1e-3, 0.01)


@pytest.mark.parametrize("head", [BertForSequenceClassification, BertForTokenClassification])
def test_layer_decay_scales_each_layer_by_its_distance_from_the_head(head):
    model = head(CONFIG, 3)
    opt = build_optimizer(model, "adamw", 1e-3, 0.01, layer_decay=0.5)
    got = by_name(model, opt)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert sorted(got) == sorted(trainable)  # every trainable parameter once, nothing frozen
    assert got["classifier.weight"] == (1e-3, 0.01)
    assert got["classifier.bias"] == (1e-3, 0.0)
    for layer in range(4):  # layer l (0-based) sits 4 - l steps below the head
        lr, wd = got[f"bert.encoder.layer.{layer}.intermediate.dense.weight"]
        assert lr == pytest.approx(1e-3 * 0.5 ** (4 - layer)) and wd == 0.01
    assert got["bert.embeddings.word_embeddings.weight"][0] == pytest.approx(1e-3 * 0.5**5)
    assert got["bert.embeddings.LayerNorm.bias"] == (pytest.approx(1e-3 * 0.5**5), 0.0)
    # the schedule multiplies each group's own rate
    sched = build_scheduler(opt, 10, 100)
    for _ in range(10):
        opt.step()
        sched.step()
    peak = by_name(model, opt)
    assert peak["classifier.weight"][0] == pytest.approx(1e-3 * 90 / 90)
    assert peak["bert.encoder.layer.0.intermediate.dense.weight"][0] == pytest.approx(1e-3 * 0.5**4)


def test_depth_of_names():
    assert depth("bert.embeddings.position_embeddings.weight", 4) == 0
    assert depth("bert.encoder.layer.3.output.dense.bias", 4) == 4
    assert depth("bert.encoder.layer.11.output.dense.bias", 12) == 12
    assert depth("bert.pooler.dense.weight", 4) == 5
    assert depth("qa_outputs.weight", 4) == 5


def test_warmup_stable_decay_holds_the_peak_until_the_last_fifth():
    from bertstream.trainer.optim.schedule import WarmupLinearDecay

    wsd, linear = WarmupLinearDecay(10, 100, "wsd"), WarmupLinearDecay(10, 100)
    assert [wsd(s) for s in (0, 9)] == [linear(s) for s in (0, 9)] == [0.1, 1.0]  # the same warm-up
    assert all(wsd(s) == 1.0 for s in range(10, 81))  # stable: the peak until step 80 of 100
    assert wsd(90) == pytest.approx(0.5) and wsd(99) == pytest.approx(0.05) and wsd(100) == 0.0
    assert linear(50) == pytest.approx(50 / 90)  # the linear schedule decays from the end of warm-up
    with pytest.raises(ValueError, match="schedule must be one of"):
        WarmupLinearDecay(10, 100, "step")


def test_a_resume_keeps_the_wsd_schedule_when_max_steps_moves():
    import torch

    from bertstream.trainer.optim.schedule import build_scheduler
    from bertstream.trainer.pretrain.resume import extend_schedule

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_scheduler(opt, 10, 100, "wsd")
    for _ in range(50):
        opt.step()
        sched.step()
    assert extend_schedule(sched, 10, 200, "wsd") == 100
    assert sched.lr_lambdas[0].schedule == "wsd" and sched.lr_lambdas[0].total == 200
    assert opt.param_groups[0]["lr"] == 1.0  # step 50 of 200 is in the stable part


def test_a_warm_up_as_long_as_the_run_is_named_in_one_line():
    # --max-steps 30 under the default 1,000 warm-up steps: the rate climbs to 3% of --lr and the loss stays put
    note = warmup_note(1000, 30)
    assert note == (
        "warning: --warmup-steps 1000 >= --max-steps 30: the whole run is warm-up, the learning rate reaches 3% of "
        "--lr and never decays (a tenth of the run: --warmup-steps 3)"
    )
    assert warmup_note(30, 30) is not None and "reaches 100%" in str(warmup_note(30, 30))
    assert warmup_note(29, 30) is None and warmup_note(0, 30) is None
