from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from bertstream.trainer.model import BertForPreTraining, BertModel, mean_losses, num_parameters
from bertstream.trainer.model_config import PRESETS, BertConfig, bert_base, bert_large, bert_tiny, pretraining_flops

VOCAB = 97


def small_config(**overrides: object) -> BertConfig:
    base = dict(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48)
    base.update(overrides)
    return BertConfig(**base)  # type: ignore[arg-type]


def make_batch(lengths: list[int], seq: int, num_masked: list[int], p: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """[CLS] A [SEP] B [SEP] rows of the given lengths, padded to ``seq``; ``num_masked[b]`` real targets."""
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    batch = {
        "input_ids": torch.zeros(b, seq, dtype=torch.long),
        "token_type_ids": torch.zeros(b, seq, dtype=torch.long),
        "attention_mask": torch.zeros(b, seq, dtype=torch.long),
        "masked_lm_positions": torch.zeros(b, p, dtype=torch.long),
        "masked_lm_ids": torch.zeros(b, p, dtype=torch.long),
        "masked_lm_weights": torch.zeros(b, p),
        "next_sentence_labels": torch.randint(0, 2, (b,), generator=g),
    }
    for i, (n, k) in enumerate(zip(lengths, num_masked)):
        batch["input_ids"][i, :n] = torch.randint(5, VOCAB, (n,), generator=g)
        batch["input_ids"][i, 0] = 2
        batch["input_ids"][i, n - 1] = 3
        batch["token_type_ids"][i, n // 2 : n] = 1
        batch["attention_mask"][i, :n] = 1
        pos = (torch.randperm(n - 2, generator=g)[:k] + 1).sort().values
        batch["masked_lm_positions"][i, :k] = pos
        batch["masked_lm_ids"][i, :k] = batch["input_ids"][i, pos]
        batch["masked_lm_weights"][i, :k] = 1.0
        batch["input_ids"][i, pos] = 4
    return batch


@pytest.fixture()
def model() -> BertForPreTraining:
    return BertForPreTraining(small_config(), seed=3).eval()


def losses(model: BertForPreTraining, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The forward output with its per-batch means (``mean_losses``) added."""
    out = model(batch)
    return {**out, **mean_losses(out)}


def test_forward_shapes_losses_and_counts(model: BertForPreTraining) -> None:
    batch = make_batch([12, 9, 5], seq=12, num_masked=[3, 2, 1], p=3)
    out = losses(model, batch)
    assert out["mlm_logits"].shape == (3, 3, VOCAB)
    assert out["nsp_logits"].shape == (3, 2)
    for key in ("loss", "mlm_loss", "nsp_loss"):
        assert out[key].shape == () and torch.isfinite(out[key])
    torch.testing.assert_close(out["loss"], out["mlm_loss"] + out["nsp_loss"])
    # Random init: the MLM loss is close to log(V), the NSP loss to log(2).
    assert abs(out["mlm_loss"].item() - torch.log(torch.tensor(VOCAB)).item()) < 1.0
    assert abs(out["nsp_loss"].item() - 0.693) < 0.3

    w = batch["masked_lm_weights"].bool()
    logits, ids = out["mlm_logits"][w], batch["masked_lm_ids"][w]
    expected_mlm = F.cross_entropy(logits, ids)
    torch.testing.assert_close(out["mlm_loss"], expected_mlm, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["nsp_loss"], F.cross_entropy(out["nsp_logits"], batch["next_sentence_labels"]))
    assert out["mlm_count"].item() == 6.0
    assert out["mlm_correct"].item() == (logits.argmax(-1) == ids).sum().item()
    assert out["nsp_count"].item() == 3.0
    assert out["nsp_correct"].item() == (out["nsp_logits"].argmax(-1) == batch["next_sentence_labels"]).sum().item()
    assert not out["mlm_count"].requires_grad and not out["mlm_correct"].requires_grad
    # The model returns sums; the means divide them by the counts, once.
    torch.testing.assert_close(out["mlm_sum"], F.cross_entropy(logits, ids, reduction="sum"))
    torch.testing.assert_close(out["nsp_sum"], 3 * out["nsp_loss"])


def test_padded_prediction_slots_do_not_count(model: BertForPreTraining) -> None:
    batch = make_batch([12, 9], seq=12, num_masked=[3, 1], p=3)
    out = losses(model, batch)
    changed = {k: v.clone() for k, v in batch.items()}
    changed["masked_lm_ids"][1, 1:] = 7  # padding slots (weight 0)
    changed["masked_lm_positions"][1, 1:] = 5
    out2 = losses(model, changed)
    torch.testing.assert_close(out["mlm_loss"], out2["mlm_loss"])
    assert out["mlm_correct"].item() == out2["mlm_correct"].item()

    no_targets = {**batch, "masked_lm_weights": torch.zeros_like(batch["masked_lm_weights"])}
    out3 = losses(model, no_targets)
    assert out3["mlm_loss"].item() == 0.0 and torch.isfinite(out3["loss"])


def test_gather_before_decoder_equals_full_logits_then_gather(model: BertForPreTraining) -> None:
    batch = make_batch([12, 10, 7], seq=12, num_masked=[4, 3, 2], p=4)
    with torch.no_grad():
        gathered, nsp = model.logits(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_lm_positions"]
        )
        full, nsp_full = model.logits(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    assert full.shape == (3, 12, VOCAB)
    pos = batch["masked_lm_positions"]
    reference = torch.stack([full[b, pos[b]] for b in range(3)])
    torch.testing.assert_close(gathered, reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nsp, nsp_full)
    torch.testing.assert_close(model(batch)["mlm_logits"], gathered)


def test_padding_does_not_change_real_token_outputs(model: BertForPreTraining) -> None:
    batch = make_batch([11, 8], seq=11, num_masked=[3, 2], p=3)
    padded = dict(batch)
    extra = 9
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        # padding ids/types are arbitrary: whatever sits under mask 0 must not matter
        fill = torch.full((2, extra), 17 if key == "input_ids" else (1 if key == "token_type_ids" else 0))
        padded[key] = torch.cat([batch[key], fill], dim=1)
    with torch.no_grad():
        seq, pooled = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        seq_p, pooled_p = model.bert(padded["input_ids"], padded["token_type_ids"], padded["attention_mask"])
        out, out_p = model(batch), model(padded)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(seq_p[:, :11][real], seq[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pooled_p, pooled, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out_p["mlm_logits"], out["mlm_logits"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out_p["nsp_logits"], out["nsp_logits"], rtol=1e-5, atol=1e-5)
    # A row alone equals the same row inside a batch padded to a longer neighbour.
    with torch.no_grad():
        alone, _ = model.bert(*(batch[k][1:, :8] for k in ("input_ids", "token_type_ids", "attention_mask")))
    torch.testing.assert_close(alone[0], seq[1, :8], rtol=1e-5, atol=1e-5)
    # And the mask is really used: unmasking the padding changes the real tokens' outputs.
    with torch.no_grad():
        all_ones = torch.ones_like(padded["attention_mask"])
        unmasked, _ = model.bert(padded["input_ids"], padded["token_type_ids"], all_ones)
    assert not torch.allclose(unmasked[:, :11][real], seq[real], atol=1e-3)


def test_decoder_is_tied_and_backward_reaches_everything() -> None:
    model = BertForPreTraining(small_config(), seed=0).train()
    batch = make_batch([12, 12], seq=12, num_masked=[3, 3], p=3)
    mean_losses(model(batch))["loss"].backward()
    names = [n for n, _ in model.named_parameters()]
    assert not any("decoder" in n for n in names)
    for name, p in model.named_parameters():
        assert p.grad is not None, name
    # The word-embedding gradient comes from the decoder too: rows of unseen tokens get gradient.
    seen = set(batch["input_ids"].flatten().tolist())
    unseen = next(i for i in range(VOCAB) if i not in seen)
    assert model.bert.embeddings.word_embeddings.weight.grad[unseen].abs().sum() > 0


def test_dropout_active_only_in_training() -> None:
    model = BertForPreTraining(small_config(hidden_dropout=0.3, attention_dropout=0.3), seed=0)
    batch = make_batch([12, 10], seq=12, num_masked=[2, 2], p=2)
    model.train()
    torch.manual_seed(0)
    a = model(batch)["mlm_logits"]
    b = model(batch)["mlm_logits"]
    assert not torch.allclose(a, b)
    model.eval()
    torch.testing.assert_close(model(batch)["mlm_logits"], model(batch)["mlm_logits"], rtol=0, atol=0)
    # attention dropout alone (hidden dropout 0) also acts in training, through SDPA's dropout_p
    only_attn = BertForPreTraining(small_config(hidden_dropout=0.0, attention_dropout=0.5), seed=0).train()
    assert not torch.allclose(only_attn(batch)["mlm_logits"], only_attn(batch)["mlm_logits"])


def test_init_is_bert_and_seeded_without_global_rng() -> None:
    cfg = small_config(vocab_size=4000, hidden_size=64, num_heads=4, intermediate_size=128)
    state = torch.random.get_rng_state()
    a = BertForPreTraining(cfg, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state), "init must not touch the global RNG"
    b = BertForPreTraining(cfg, seed=1)
    c = BertForPreTraining(cfg, seed=2)
    for (name, pa), pb, pc in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(pa, pb), name
        if name.endswith("weight") and "LayerNorm" not in name:
            assert not torch.equal(pa, pc), name
    # the trunk alone draws the same numbers as the trunk of the pretraining model
    trunk = BertModel(cfg, seed=1)
    for name, p in trunk.state_dict().items():
        assert torch.equal(p, a.state_dict()["bert." + name]), name
    word = a.bert.embeddings.word_embeddings.weight
    assert abs(word.std().item() - 0.02) < 0.001 and abs(word.mean().item()) < 0.001
    assert torch.all(word[cfg.pad_token_id] == 0)
    query = a.bert.encoder.layer[0].attention.self.query
    assert abs(query.weight.std().item() - 0.02) < 0.003 and torch.all(query.bias == 0)
    ln = a.bert.encoder.layer[1].output.LayerNorm
    assert torch.all(ln.weight == 1) and torch.all(ln.bias == 0)
    assert torch.all(a.cls.predictions.bias == 0)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_parameter_counts_match_hugging_face(name: str) -> None:
    transformers = pytest.importorskip("transformers")
    from bertstream.trainer.hf.config import hf_config_dict

    cfg = PRESETS[name](30522)
    with torch.device("meta"):
        ours = BertForPreTraining(cfg)
        theirs = transformers.BertForPreTraining(transformers.BertConfig(**hf_config_dict(cfg)))
    assert num_parameters(ours) == sum(p.numel() for p in theirs.parameters())


def test_preset_shapes() -> None:
    assert [(PRESETS[n](100).num_layers, PRESETS[n](100).hidden_size, PRESETS[n](100).num_heads) for n in PRESETS] == [
        (2, 128, 2),
        (4, 256, 4),
        (4, 512, 8),
        (8, 512, 8),
        (12, 768, 12),
        (24, 1024, 16),
    ]
    assert bert_base(30522).intermediate_size == 3072
    with torch.device("meta"):
        base = num_parameters(BertForPreTraining(bert_base(30522)))
        large = num_parameters(BertForPreTraining(bert_large(30522)))
    assert 109e6 < base < 111e6  # the paper's "110M"
    assert 330e6 < large < 340e6  # the paper's "340M"


def test_config_validation_names_the_bad_value() -> None:
    with pytest.raises(ValueError, match=r"hidden_size=100 is not divisible by num_heads=3"):
        small_config(hidden_size=100, num_heads=3)
    with pytest.raises(ValueError, match=r"vocab_size must be a positive integer, got 0"):
        small_config(vocab_size=0)
    with pytest.raises(ValueError, match=r"hidden_dropout .* got 1.5"):
        small_config(hidden_dropout=1.5)
    with pytest.raises(ValueError, match=r"attention_dropout .* got -0.1"):
        small_config(attention_dropout=-0.1)
    with pytest.raises(ValueError, match=r"layer_norm_eps .* got 0"):
        small_config(layer_norm_eps=0)
    with pytest.raises(ValueError, match=r"pad_token_id=200 is outside"):
        small_config(pad_token_id=200)
    with pytest.raises(ValueError, match=r"num_layers must be a positive integer, got 2.5"):
        small_config(num_layers=2.5)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['hidden_act'\]"):
        BertConfig.from_dict({"vocab_size": 10, "hidden_act": "relu"})
    with pytest.raises(ValueError, match="vocab_size"):
        BertConfig.from_dict({"hidden_size": 64})


def test_config_round_trip_and_frozen() -> None:
    cfg = bert_tiny(1000)
    assert cfg.intermediate_size == 512
    data = cfg.to_dict()
    assert data["intermediate_size"] == 512 and data["num_layers"] == 2
    assert BertConfig.from_dict(data) == cfg
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.hidden_size = 64  # type: ignore[misc]


def test_batch_errors(model: BertForPreTraining) -> None:
    batch = make_batch([12], seq=12, num_masked=[2], p=2)
    with pytest.raises(KeyError, match="next_sentence_labels"):
        model({k: v for k, v in batch.items() if k != "next_sentence_labels"})
    long_ids = torch.ones(1, 513, dtype=torch.long)
    with pytest.raises(ValueError, match="sequence length 513 exceeds max_position_embeddings=512"):
        model.bert(long_ids)


def test_flop_counter() -> None:
    cfg = small_config()
    h, i, v, t, p = 32, 48, VOCAB, 10, 3
    layer = 2 * t * (3 * h * h + h * h + 2 * h * i) + 4 * t * t * h
    forward = 2 * layer + 2 * (h * h + 2 * h) + 2 * p * (h * h + h * v)
    assert pretraining_flops(cfg, t, p, backward=False) == forward
    assert pretraining_flops(cfg, t, p) == 3 * forward

    # 6 * N * tokens, with N the encoder's weight-matrix parameters, plus attention terms.
    base = bert_base(30522)
    with torch.device("meta"):
        model = BertModel(base)
    n_matmul = sum(
        p.numel() for name, p in model.encoder.named_parameters() if name.endswith("weight") and "LayerNorm" not in name
    )
    t = 128
    attention = 3 * base.num_layers * 4 * t * t * base.hidden_size
    pooler = 3 * 2 * (base.hidden_size**2 + 2 * base.hidden_size)
    assert pretraining_flops(base, t, 0) == 6 * n_matmul * t + attention + pooler
    # The MLM head costs 6 * (H*H + H*V) per masked position.
    assert pretraining_flops(base, t, 20) - pretraining_flops(base, t, 0) == 20 * 6 * (768 * 768 + 768 * 30522)
    # BERT-base at 512 tokens, 76 targets: ~6 * 85M * 512 + attention ~= 0.3 TFLOP per sequence
    assert 0.28e12 < pretraining_flops(base, 512, 76) < 0.32e12
    with pytest.raises(ValueError, match="seq_len"):
        pretraining_flops(base, 0, 0)


def test_bf16_autocast_and_bf16_weights_run_the_padding_mask(model: BertForPreTraining) -> None:
    batch = make_batch([12, 7], seq=12, num_masked=[3, 2], p=3)
    reference = losses(model, batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = losses(model, batch)
    assert out["mlm_logits"].dtype == torch.bfloat16 and out["loss"].dtype == torch.float32
    torch.testing.assert_close(out["mlm_logits"].float(), reference["mlm_logits"], rtol=0, atol=0.05)
    out["loss"].backward()
    half = BertForPreTraining(small_config(), seed=3).to(torch.bfloat16).eval()
    torch.testing.assert_close(losses(half, batch)["loss"], reference["loss"], rtol=0.02, atol=0)


def test_seed_gives_same_weights_whatever_dtype_and_under_meta() -> None:
    cfg = small_config()
    a = BertForPreTraining(cfg, seed=4)
    b = BertForPreTraining(cfg, seed=0).to(torch.float64)
    b.reset_parameters(seed=4)
    for name, p in a.state_dict().items():
        assert torch.equal(b.state_dict()[name].float(), p), name
    with torch.device("meta"):
        meta = BertForPreTraining(cfg)
    assert all(p.is_meta for p in meta.parameters())


def test_pre_ln_normalises_sublayer_inputs_and_adds_a_final_norm() -> None:
    post = BertForPreTraining(small_config(), seed=3).eval()
    pre = BertForPreTraining(small_config(norm_placement="pre"), seed=3).eval()
    extra = set(dict(pre.named_parameters())) - set(dict(post.named_parameters()))
    assert extra == {"bert.encoder.final_layer_norm.weight", "bert.encoder.final_layer_norm.bias"}
    # Same weights (the shared names draw the same values), other function.
    shared = {k: v for k, v in pre.state_dict().items() if k in post.state_dict()}
    assert all(torch.equal(v, post.state_dict()[k]) for k, v in shared.items())
    batch = make_batch([10, 7], 12, [3, 2], 4)
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    with torch.no_grad():
        seq_post, _ = post.bert(ids, types, mask)
        seq_pre, _ = pre.bert(ids, types, mask)
        # by hand: x + Attn(LN(x)); x + FFN(LN(x)); final LN
        x = pre.bert.embeddings(ids, types)
        from bertstream.trainer.model import attention_bias

        bias = attention_bias(mask, x.dtype)
        for layer in pre.bert.encoder.layer:
            a = layer.attention
            x = x + a.output.dense(a.self(a.output.LayerNorm(x), bias))
            x = x + layer.output.dense(layer.intermediate(layer.output.LayerNorm(x)))
        x = pre.bert.encoder.final_layer_norm(x)
    torch.testing.assert_close(seq_pre, x)
    assert not torch.allclose(seq_pre, seq_post)
    states = pre.bert.hidden_states(ids, types, mask)
    torch.testing.assert_close(states[-1], seq_pre)  # the last state is what the heads read
    out = pre.train()(batch, nsp=False)
    out["mlm_sum"].backward()
    assert all(p.grad is not None for n, p in pre.named_parameters() if not n.startswith(("bert.pooler", "cls.seq")))


def test_norm_placement_is_validated_and_round_trips() -> None:
    with pytest.raises(ValueError, match="norm_placement must be one of post, pre, got 'middle'"):
        small_config(norm_placement="middle")
    config = small_config(norm_placement="pre")
    assert BertConfig.from_dict(config.to_dict()) == config
    # a checkpoint written before the field existed reads as BERT's post-LN
    old = {k: v for k, v in config.to_dict().items() if k != "norm_placement"}
    assert BertConfig.from_dict(old).norm_placement == "post"
