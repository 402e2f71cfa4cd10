"""The vocabulary padded to a multiple of 64 inside the model (issue 52): aligned GEMMs, the real size outside."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertstream.trainer.embeddings import pad_vocab
from bertstream.trainer.model import BertConfig, BertForPreTraining, BertModel, num_parameters

V = 100  # pads to 128


def config() -> BertConfig:
    return BertConfig(vocab_size=V, hidden_size=16, num_layers=1, num_heads=2, max_position_embeddings=32)


def batch(gen: torch.Generator) -> dict[str, torch.Tensor]:
    b, t, p = 3, 12, 4
    return {
        "input_ids": torch.randint(0, V, (b, t), generator=gen),
        "token_type_ids": torch.zeros(b, t, dtype=torch.long),
        "attention_mask": torch.ones(b, t, dtype=torch.long),
        "masked_lm_positions": torch.randint(0, t, (b, p), generator=gen),
        "masked_lm_ids": torch.randint(0, V, (b, p), generator=gen),
        "masked_lm_weights": torch.ones(b, p),
        "next_sentence_labels": torch.randint(0, 2, (b,), generator=gen),
    }


def test_rows_are_padded_inside_and_the_real_size_outside():
    model = BertForPreTraining(config(), seed=3)
    assert pad_vocab(V) == 128 and pad_vocab(30522) == 30528 and pad_vocab(128) == 128
    word = model.bert.embeddings.word_embeddings.weight
    assert word.shape == (128, 16) and model.cls.predictions.bias.shape == (128,)
    assert not word[V:].any()  # zero rows
    state = model.state_dict()
    assert state["bert.embeddings.word_embeddings.weight"].shape == (V, 16)
    assert state["cls.predictions.bias"].shape == (V,)
    assert num_parameters(model) == sum(v.numel() for v in state.values())
    again = BertForPreTraining(config(), seed=99)
    again.load_state_dict(state)  # a real-size state (a checkpoint, HF weights) loads into the padded model
    for k, v in again.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert not again.bert.embeddings.word_embeddings.weight[V:].any()
    trunk = BertModel(config(), seed=3)
    assert trunk.state_dict()["embeddings.word_embeddings.weight"].shape == (V, 16)


def test_padded_logits_never_win_nor_enter_the_loss():
    model = BertForPreTraining(config(), seed=0).eval()  # no dropout: the two computations below see the same
    with torch.no_grad():  # make the padded rows as tempting as can be: they must still not count
        model.bert.embeddings.word_embeddings.weight[V:] = 5.0
        model.cls.predictions.bias[V:] = 100.0
    b = batch(torch.Generator().manual_seed(0))
    out = model(b)
    assert out["mlm_logits"].shape[-1] == V
    seq, _ = model.bert(b["input_ids"], b["token_type_ids"], b["attention_mask"])
    hidden = model.cls.predictions.transform(seq.gather(1, b["masked_lm_positions"][..., None].expand(-1, -1, 16)))
    real = F.linear(hidden, model.bert.embeddings.word_embeddings.weight[:V], model.cls.predictions.bias[:V])
    expected = F.cross_entropy(real.reshape(-1, V), b["masked_lm_ids"].reshape(-1), reduction="sum")
    torch.testing.assert_close(out["mlm_sum"], expected)
    out["mlm_sum"].backward()
    grad = model.bert.embeddings.word_embeddings.weight.grad
    assert grad is not None and not grad[V:].any() and not model.cls.predictions.bias.grad[V:].any()


def test_the_optimizer_state_is_saved_at_the_real_size_and_loads_back():
    from bertstream.trainer.optim.table import build_optimizer

    model = BertForPreTraining(config(), seed=0)
    for name in ("adamw", "lamb"):
        opt = build_optimizer(model, name, 1e-3, 0.01)
        model(batch(torch.Generator().manual_seed(1)))["mlm_sum"].backward()
        opt.step()
        state = opt.state_dict()
        word = model.bert.embeddings.word_embeddings.weight
        index = [p for g in opt.param_groups for p in g["params"]].index(word)
        assert state["state"][index]["exp_avg"].shape == (V, 16)
        assert opt.state[word]["exp_avg"].shape == (128, 16)  # the live state stays padded
        fresh = build_optimizer(model, name, 1e-3, 0.01)
        fresh.load_state_dict(state)
        assert fresh.state[word]["exp_avg"].shape == (128, 16)
        assert torch.equal(fresh.state[word]["exp_avg"], opt.state[word]["exp_avg"])
        model.zero_grad()
