"""A pre-LN checkpoint leaves bertstream: ``export-hf`` writes it as transformers' RoBERTa-PreLayerNorm, which the
Auto classes and the fill-mask pipeline load as it is, with our outputs; ``--init``/``--init-from`` read it back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from bertstream.trainer.cli import main
from bertstream.trainer.config import TrainConfig
from bertstream.trainer.hf.export import export_checkpoint
from bertstream.trainer.hf.load import load_hf
from bertstream.trainer.model import BertForPreTraining
from bertstream.trainer.model_config import BertConfig
from bertstream.trainer.pretrain.loop import pretrain
from bertstream.trainer.weights import resolve_init
from tests.trainer.finetune.hf_fixtures import randomise

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
TOL = {"rtol": 0.0, "atol": 1e-4}


@pytest.fixture(scope="module")
def pre_ln(demo_shards: Path, tmp_path_factory) -> dict[str, Path]:
    """A real 2-step pre-LN pretraining run whose weights are then perturbed (every LayerNorm and bias too, so a
    tensor mapped to the wrong place cannot go unnoticed), and its export."""
    root = tmp_path_factory.mktemp("pre_ln")
    run = root / "run"
    pretrain(
        TrainConfig.build(
            **{"paths": (str(demo_shards),), "output": str(run), "preset": "tiny", "batch_size": 4},
            **{"max_steps": 2, "checkpoint_every": 2, "num_workers": 0, "tensorboard": False},
            norm_placement="pre",
        )
    )
    step = run / "checkpoints" / "step-0000002"
    config = BertConfig.from_dict(json.loads((step / "config.json").read_text())["model"])
    assert config.norm_placement == "pre"
    model = BertForPreTraining(config)
    model.load_state_dict(load_file(step / "model.safetensors"))
    save_file({k: v.contiguous() for k, v in randomise(model, seed=5).state_dict().items()}, step / "model.safetensors")
    hf = export_checkpoint(step, root / "hf")
    return {"step": step, "hf": hf, "root": root}


def _ours(step: Path) -> BertForPreTraining:
    config = BertConfig.from_dict(json.loads((step / "config.json").read_text())["model"])
    model = BertForPreTraining(config)
    model.load_state_dict(load_file(step / "model.safetensors"))
    return model.eval()


LINES = ["the for statement iterates over the items", "a list", "", "class definitions create a new namespace here"]


def test_the_export_is_roberta_prelayernorm_and_auto_classes_give_our_outputs(pre_ln):
    hf = pre_ln["hf"]
    assert json.loads((hf / "config.json").read_text())["model_type"] == "roberta-prelayernorm"
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf)
    assert tokenizer.is_fast
    enc = tokenizer(LINES, padding=True, return_tensors="pt")  # padding in the batch
    real = enc["attention_mask"].bool()
    assert not real.all()
    ours = _ours(pre_ln["step"])
    mlm = transformers.AutoModelForMaskedLM.from_pretrained(hf).eval()
    base = transformers.AutoModel.from_pretrained(hf).eval()
    assert type(mlm).__name__ == "RobertaPreLayerNormForMaskedLM" and type(base).__name__ == "RobertaPreLayerNormModel"
    with torch.no_grad():
        logits = ours.logits(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])[0]
        torch.testing.assert_close(mlm(**enc).logits[real], logits[real], **TOL)
        states = ours.bert.hidden_states(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])[-1]
        torch.testing.assert_close(base(**enc).last_hidden_state[real], states[real], **TOL)

    fill = transformers.pipeline("fill-mask", model=str(hf), tokenizer=str(hf), device="cpu")
    answers = fill(f"the for {tokenizer.mask_token} iterates over the items")
    assert len(answers) == 5 and sorted(a["score"] for a in answers)[::-1] == [a["score"] for a in answers]


def test_last_hidden_states_match_berttrain_embed_of_the_checkpoint(pre_ln, tmp_path):
    text = tmp_path / "texts.txt"
    text.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "emb.arrow"
    args = ["embed", "--init", str(pre_ln["step"]), "--input", str(text), "--output", str(out), "--pooling", "none"]
    result = CliRunner().invoke(main, [*args, "--batch-size", "4"])  # one batch: padded together
    assert result.exit_code == 0, result.output
    with pa.memory_map(str(out)) as f:
        table = pa.ipc.open_file(f).read_all()
    tokenizer = transformers.AutoTokenizer.from_pretrained(pre_ln["hf"])
    enc = tokenizer(LINES, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = transformers.AutoModel.from_pretrained(pre_ln["hf"]).eval()(**enc).last_hidden_state
    for i, (n, flat) in enumerate(zip(table["num_tokens"].to_pylist(), table["embedding"].to_pylist())):
        assert n == int(enc["attention_mask"][i].sum())
        embedded = torch.tensor(np.asarray(flat, dtype=np.float32).reshape(n, -1))
        torch.testing.assert_close(states[i, :n], embedded, **TOL)


def test_init_and_init_from_read_the_folder_back_with_the_same_weights(pre_ln, demo_shards, tmp_path):
    ours = _ours(pre_ln["step"]).state_dict()
    config, state, report = load_hf(pre_ln["hf"])
    assert config.norm_placement == "pre" and config.max_position_embeddings == 512
    for key, value in ours.items():
        if key.startswith("cls.seq_relationship."):  # RoBERTa has no NSP head: drawn fresh, and said so
            assert key in report.fresh
        else:
            assert torch.equal(state[key], value), key
    init = resolve_init(str(pre_ln["hf"]), None, flag="--init")
    assert init.kind == "hf" and init.config == config
    # pretraining continues from the folder: its model is pre-LN without being told, and its weights are these
    run = tmp_path / "continued"
    pretrain(
        TrainConfig.build(
            **{"paths": (str(demo_shards),), "output": str(run), "init_from": str(pre_ln["hf"]), "batch_size": 4},
            **{"max_steps": 1, "checkpoint_every": 1, "num_workers": 0, "tensorboard": False, "lr": 1e-12},
        )
    )
    saved = json.loads((run / "config.json").read_text())
    assert saved["model"]["norm_placement"] == "pre"
    after = load_file(run / "checkpoints" / "step-0000001" / "model.safetensors")
    torch.testing.assert_close(
        after["bert.encoder.final_layer_norm.weight"], ours["bert.encoder.final_layer_norm.weight"]
    )
    from bertstream.cli.errors import UsageError
    from bertstream.trainer.pretrain.inputs import model_config

    post = TrainConfig.build(
        paths=(str(demo_shards),), output=str(tmp_path / "x"), init_from=str(pre_ln["hf"]), norm_placement="post"
    )
    with pytest.raises(UsageError, match="is a pre-LN model: drop --norm-placement"):
        model_config(post, init.vocab, None)


@pytest.mark.parametrize("field", ["pad_token_id", "max_position_embeddings"])
def test_an_export_whose_config_holds_a_string_count_is_refused_naming_it(field):
    """Both are subtracted before BertConfig checks them: a string was a 47-line traceback (issue 44)."""
    from bertstream.trainer.hf import prelayernorm as PRE
    from bertstream.trainer.hf.config import HFCheckpointError, config_from_hf

    data = {"model_type": PRE.MODEL_TYPE, "vocab_size": 100, "max_position_embeddings": 130, "pad_token_id": 1}
    assert config_from_hf(data).max_position_embeddings == 128
    with pytest.raises(HFCheckpointError, match=f"^x/config.json: {field} must be an integer, got '7'$"):
        config_from_hf({**data, field: "7"}, "x/config.json")
