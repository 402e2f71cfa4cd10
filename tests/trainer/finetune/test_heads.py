"""Task heads: Hugging Face names, outputs and losses, on weights loaded from a transformers folder."""

from __future__ import annotations

import pytest
import torch

from bertstream.schemas import tasks as T
from bertstream.trainer.finetune.heads import load_encoder_state
from bertstream.trainer.finetune.tasks import get_task
from bertstream.trainer.model import BertForPreTraining
from bertstream.trainer.weights import resolve_init
from tests.trainer.finetune.hf_fixtures import CONFIG, TOL, VOCAB, batch, save_hf

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


@pytest.mark.parametrize("kind", [T.CLASSIFICATION, T.NER, T.SQUAD])
def test_hf_folder_gives_the_same_encoder_and_head_outputs_as_transformers(kind, tmp_path):
    hf = save_hf(kind, tmp_path / "hf", seed=1)
    init = resolve_init(str(tmp_path / "hf"), VOCAB, flag="--init")
    assert init.kind == "hf" and init.config == CONFIG
    ours = get_task(kind).build_model(init.config, 3, seed=0)
    load_encoder_state(ours, init.state, "--init hf")
    ours.eval()
    # names: HF's, one to one (HF's token and QA models have no pooler; ours keeps a frozen one)
    hf_names = {k: v.shape for k, v in hf.state_dict().items() if not k.endswith("position_ids")}
    our_names = {k: v.shape for k, v in ours.state_dict().items()}
    extra = {k for k in our_names if k.startswith("bert.pooler.")} if kind != T.CLASSIFICATION else set()
    assert {k: s for k, s in our_names.items() if k not in extra} == hf_names
    assert all(not p.requires_grad for p in ours.bert.pooler.parameters()) == (kind != T.CLASSIFICATION)

    x = batch()
    real = x["attention_mask"].bool()
    with torch.no_grad():
        seq, pooled = ours.bert(x["input_ids"], x["token_type_ids"], x["attention_mask"])
        enc = hf.bert(**x)
        torch.testing.assert_close(seq[real], enc.last_hidden_state[real], **TOL)
        if kind == T.CLASSIFICATION:
            torch.testing.assert_close(pooled, enc.pooler_output, **TOL)
        # load_hf draws heads fresh (reported); with HF's head weights our head computes HF's logits
        head = "qa_outputs" if kind == T.SQUAD else "classifier"
        getattr(ours, head).load_state_dict(getattr(hf, head).state_dict())
        out, theirs = ours(x), hf(**x)
    if kind == T.SQUAD:
        torch.testing.assert_close(out["start_logits"][real], theirs.start_logits[real], **TOL)
        torch.testing.assert_close(out["end_logits"][real], theirs.end_logits[real], **TOL)
    else:
        got, want = (
            (out["logits"], theirs.logits) if kind == T.CLASSIFICATION else (out["logits"][real], theirs.logits[real])
        )
        torch.testing.assert_close(got, want, **TOL)


def test_losses_match_transformers(tmp_path):
    hf = save_hf(T.SQUAD, tmp_path / "hf", seed=2)
    ours = get_task(T.SQUAD).build_model(CONFIG, 0)
    ours.load_state_dict({**hf.state_dict(), **{k: v for k, v in ours.state_dict().items() if "pooler" in k}})
    ours.eval()
    x = {**batch(), "start_positions": torch.tensor([3, 0, 2]), "end_positions": torch.tensor([5, 0, 4])}
    with torch.no_grad():
        torch.testing.assert_close(ours(x)["loss"], hf(**x).loss, **TOL)
    # regression: one output, MSE
    reg = get_task(T.REGRESSION).build_model(CONFIG, 0, seed=3).eval()
    x = {**batch(), "labels": torch.tensor([0.5, 4.0, 2.25])}
    with torch.no_grad():
        out = reg(x)
    assert out["logits"].shape == (3,)
    torch.testing.assert_close(out["loss"], ((out["logits"] - x["labels"]) ** 2).mean())
    # token classification ignores -100
    ner = get_task(T.NER).build_model(CONFIG, 4, seed=3).eval()
    labels = torch.full((3, 16), -100)
    labels[0, 1], labels[2, 3] = 2, 0
    with torch.no_grad():
        out = ner({**batch(), "labels": labels})
    want = torch.nn.functional.cross_entropy(out["logits"][[0, 2], [1, 3]], torch.tensor([2, 0]))
    torch.testing.assert_close(out["loss"], want)


def test_encoder_weights_must_be_complete():
    model = get_task(T.CLASSIFICATION).build_model(CONFIG, 2)
    state = {k: v for k, v in BertForPreTraining(CONFIG).state_dict().items() if "layer.1." not in k}
    with pytest.raises(ValueError, match="lack encoder tensor"):
        load_encoder_state(model, state, "--init x")


def test_mean_pooling_reads_the_real_tokens_only_and_leaves_the_pooler_out(tmp_path):
    """--pooling mean: the head sees the mean of the last layer over real tokens (padding changes nothing), and
    the pooler gets no gradient (DDP would wait for it) while the encoder does."""
    model = get_task(T.CLASSIFICATION).build_model(CONFIG, 2, seed=0, pooling="mean")
    model.eval()
    x = batch()
    ids = x["input_ids"][:1]
    short = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
    padded = {k: torch.cat([v, torch.zeros_like(v[:, :5])], 1) for k, v in short.items()}  # 5 pad tokens
    with torch.no_grad():
        seq, _ = model.bert(short["input_ids"], short["token_type_ids"], short["attention_mask"])
        want = model.classifier(seq.mean(1))
        torch.testing.assert_close(model(short)["logits"], want, **TOL)
        torch.testing.assert_close(model(padded)["logits"], want, **TOL)
    model.train()
    out = model({**short, "labels": torch.tensor([1])})
    out["loss"].backward()
    assert all(p.grad is None for p in model.bert.pooler.parameters())
    assert model.bert.embeddings.word_embeddings.weight.grad is not None
    # the default stays BERT's pooler on [CLS], and a name outside the choices is refused
    assert get_task(T.CLASSIFICATION).build_model(CONFIG, 2).pooling == "cls"
    with pytest.raises(ValueError, match="pooling must be one of"):
        get_task(T.CLASSIFICATION).build_model(CONFIG, 2, pooling="max")
