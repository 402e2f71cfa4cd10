"""Rotary position embeddings (``BertConfig.position_embedding_type="rope"``): queries and keys turned by their
position in every attention path, no position matrix, kept on resume, refused by export-hf in one line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.cli import main
from bertstream.trainer.encoder import rotary_tables, rotate_qk
from bertstream.trainer.model import BertForPreTraining, BertModel, num_parameters
from bertstream.trainer.model_config import BertConfig, parameter_count
from bertstream.trainer.unpad import plan
from tests.trainer.test_cli_errors import one_error
from tests.trainer.test_run_safety import small_dataset
from tests.trainer.test_unpad import _batch, _run

ROPE = BertConfig(
    vocab_size=100,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    position_embedding_type="rope",
)


def test_rotate_qk_turns_queries_and_keys_as_hugging_faces_rotate_half_and_keeps_values():
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    heads, d, t = 4, 8, 10
    qkv = torch.randn(2, t, 3 * heads * d, generator=torch.Generator().manual_seed(0))  # [B, T, 3H]
    got = rotate_qk(qkv, rotary_tables(torch.arange(t), d, torch.float32), heads).view(2, t, 3, heads, d)
    q, k, v = qkv.view(2, t, 3, heads, d).permute(2, 0, 3, 1, 4)  # [B, heads, T, d] each
    angles = torch.outer(torch.arange(t).float(), 10000.0 ** -(torch.arange(0, d, 2).float() / d))  # [T, d/2]
    emb = torch.cat((angles, angles), -1)
    want_q, want_k = modeling_llama.apply_rotary_pos_emb(q, k, emb.cos()[None], emb.sin()[None])
    torch.testing.assert_close(got[:, :, 0], want_q.transpose(1, 2))
    torch.testing.assert_close(got[:, :, 1], want_k.transpose(1, 2))
    assert torch.equal(got[:, :, 2], v.transpose(1, 2))


def test_a_query_key_score_depends_on_their_offset_only():
    heads, d = 1, 16
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(d, generator=g), torch.randn(d, generator=g)

    def score(i: int, j: int) -> float:
        qkv = torch.zeros(2, 3 * d)  # row 0: the query at position i; row 1: the key at position j
        qkv[0, :d], qkv[1, d : 2 * d] = q, k
        turned = rotate_qk(qkv, rotary_tables(torch.tensor([i, j]), d, torch.float32), heads)
        return float(turned[0, :d] @ turned[1, d : 2 * d])

    assert score(3, 7) == pytest.approx(score(40, 44), rel=1e-4)
    assert score(3, 7) == pytest.approx(score(100, 104), rel=1e-4)
    assert score(3, 7) != pytest.approx(score(3, 8), rel=1e-3)


def test_a_rope_model_has_no_position_matrix_and_counts_its_parameters():
    model = BertForPreTraining(ROPE, seed=3)
    assert not [k for k in model.state_dict() if "position" in k]
    absolute = BertForPreTraining(replace(ROPE, position_embedding_type="absolute"), seed=3)
    assert num_parameters(absolute) - num_parameters(model) == ROPE.max_position_embeddings * ROPE.hidden_size
    assert num_parameters(model) == parameter_count(ROPE)
    assert BertConfig.from_dict(ROPE.to_dict()) == ROPE
    # a checkpoint written before the field existed is an absolute-position model
    old = {k: v for k, v in ROPE.to_dict().items() if k != "position_embedding_type"}
    assert BertConfig.from_dict(old).position_embedding_type == "absolute"


def test_the_config_names_a_bad_position_embedding_type_or_an_odd_head_size():
    with pytest.raises(ValueError, match="position_embedding_type must be one of absolute, rope, got 'alibi'"):
        replace(ROPE, position_embedding_type="alibi")
    with pytest.raises(ValueError, match="head size 5 .* must be even"):
        BertConfig(vocab_size=100, hidden_size=20, num_heads=4, position_embedding_type="rope")


def test_word_order_reaches_a_rope_model_without_position_embeddings():
    """Without a position matrix, only the rotation tells the tokens' order: the same encoder blind to it gives a
    permuted sequence's vectors permuted."""
    model = BertModel(ROPE, seed=3).eval()
    with torch.no_grad():
        for layer in model.encoder.layer:  # BERT's init attends almost uniformly: sharpen it, as training does
            layer.attention.self.query.weight.mul_(30)
            layer.attention.self.key.weight.mul_(30)
    ids = torch.tensor([[2, 11, 12, 13, 14, 15, 3]])
    order = torch.tensor([0, 5, 2, 4, 1, 3, 6])

    def change() -> float:
        with torch.no_grad():
            return float((model(ids[:, order])[0] - model(ids)[0][:, order]).abs().max())

    assert change() > 0.01
    model.encoder.rope = False  # no rotation: nothing tells the order
    assert change() < 1e-5


@pytest.mark.parametrize("layout", ["loader", "model"])
@pytest.mark.parametrize("attention", ["each", "dense"])  # the CPU's per-sequence loop; the [B, T] scatter
def test_unpadded_rope_losses_and_grads_equal_the_padded_path(layout, attention, monkeypatch):
    if attention == "dense":  # what torch.compile (and CUDA with attention dropout) takes
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    model = BertForPreTraining(ROPE, seed=3)
    batch = _batch([40, 11, 27], width=40, predictions=6)
    padded, padded_grads = _run(model, batch, unpad=False)
    out, grads = _run(model, {**batch, **plan(batch["attention_mask"])} if layout == "loader" else batch, unpad=True)
    for key in ("mlm_sum", "nsp_sum", "mlm_logits", "nsp_logits"):
        torch.testing.assert_close(out[key], padded[key], rtol=1e-5, atol=1e-5, msg=key)
    for name, grad in padded_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_hidden_states_and_bf16_autocast_turn_by_the_same_positions():
    model = BertModel(ROPE, seed=3).eval()
    ids = torch.randint(5, 100, (2, 9), generator=torch.Generator().manual_seed(2))
    mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    with torch.no_grad():
        seq, _ = model(ids, attention_mask=mask)
        torch.testing.assert_close(model.hidden_states(ids, attention_mask=mask)[-1], seq)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half, _ = model(ids, attention_mask=mask)
    torch.testing.assert_close(half.float(), seq, rtol=0, atol=0.1)


FAST = ["--batch-size", "4", "--warmup-steps", "1", "--checkpoint-every", "2", "--num-workers", "0"]
FAST += ["--no-tensorboard", "--log-every", "1", "--device", "cpu", "--model", "tiny"]


def test_a_rope_run_trains_resumes_without_its_flags_and_export_hf_refuses_it(tmp_path):
    data = small_dataset(tmp_path / "ds", n=32)
    spec = tmp_path / "rope.json"
    spec.write_text(json.dumps({"position_embedding_type": "rope"}))
    out = tmp_path / "run"

    def berttrain(*args: str):
        return CliRunner().invoke(main, ["pretrain", "--data", str(data), "--output", str(out), *FAST, *args])

    result = berttrain("--model-config", str(spec), "--max-steps", "2")
    assert result.exit_code == 0, result.output
    result = berttrain("--max-steps", "4")  # the resume is not told the model again
    assert result.exit_code == 0, result.output
    assert "trained to step 4" in result.output
    step = ckpt.step_dir(out, 4)
    assert json.loads((step / "config.json").read_text())["model"]["position_embedding_type"] == "rope"
    from safetensors import safe_open

    with safe_open(str(step / "model.safetensors"), "pt") as f:
        assert not [k for k in f.keys() if "position" in k]  # noqa: SIM118 (safe_open is no mapping)
    hf: Path = tmp_path / "hf"
    refused = CliRunner().invoke(main, ["export-hf", str(out), str(hf)])
    one_error(refused, 1, "position_embedding_type='rope': no transformers BERT class holds rotary")
    assert not hf.exists()
