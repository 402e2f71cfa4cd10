from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab, vocab_sha256
from bertstream.trainer.hf.config import HFCheckpointError, hf_config_dict
from bertstream.trainer.hf.convert import to_hf_state_dict
from bertstream.trainer.hf.export import export_checkpoint, export_hf
from bertstream.trainer.hf.load import load_hf
from bertstream.trainer.model import BertConfig, BertForPreTraining, BertModel
from tests.trainer.finetune.hf_fixtures import randomise

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
TOL = dict(rtol=0.0, atol=1e-4)

CONFIG = BertConfig(
    vocab_size=120,
    hidden_size=48,
    num_layers=3,
    num_heads=4,
    intermediate_size=80,  # not 4H: the mapping must not assume it
    max_position_embeddings=40,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
)
TOKENS = (*SPECIAL_TOKENS, *(f"tok{i}" for i in range(CONFIG.vocab_size - len(SPECIAL_TOKENS))))


def hf_config() -> transformers.BertConfig:
    return transformers.BertConfig(**hf_config_dict(CONFIG))


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    b, t = 3, 17
    ids = torch.randint(5, CONFIG.vocab_size, (b, t), generator=g)
    ids[:, 0] = 2
    types = torch.zeros(b, t, dtype=torch.long)
    types[:, 8:] = 1
    mask = torch.ones(b, t, dtype=torch.long)
    mask[1, 12:] = 0
    mask[2, 6:] = 0
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def ours_from(config: BertConfig, state: dict[str, torch.Tensor]) -> BertForPreTraining:
    model = BertForPreTraining(config)
    model.load_state_dict(state)  # strict: the state dict must be complete and exact
    return model.eval()


def assert_same_outputs(ours: BertForPreTraining, hf: torch.nn.Module, x: dict[str, torch.Tensor]) -> None:
    real = x["attention_mask"].bool()
    with torch.no_grad():
        mlm, nsp = ours.logits(x["input_ids"], x["token_type_ids"], x["attention_mask"])
        seq, pooled = ours.bert(x["input_ids"], x["token_type_ids"], x["attention_mask"])
        out = hf(**x)
        enc = hf.bert(**x)
    torch.testing.assert_close(seq[real], enc.last_hidden_state[real], **TOL)
    torch.testing.assert_close(pooled, enc.pooler_output, **TOL)
    torch.testing.assert_close(mlm[real], out.prediction_logits[real], **TOL)
    torch.testing.assert_close(nsp, out.seq_relationship_logits, **TOL)


@pytest.fixture()
def hf_pretraining() -> torch.nn.Module:
    torch.manual_seed(0)  # HF draws its init from the global RNG
    return randomise(transformers.BertForPreTraining(hf_config()), 1)


def test_load_hf_pretraining_checkpoint(tmp_path: Path, hf_pretraining: torch.nn.Module) -> None:
    hf_pretraining.save_pretrained(tmp_path)
    config, state, report = load_hf(tmp_path)
    assert config == CONFIG
    assert report.fresh == () and report.ignored == ()
    assert report.architectures == ("BertForPreTraining",)
    assert report.loaded == len(state)
    assert_same_outputs(ours_from(config, state), hf_pretraining, inputs())
    # the same parameter names, one to one
    hf_layer = hf_pretraining.bert.encoder.layer[1].attention.self
    assert torch.equal(state["bert.encoder.layer.1.attention.self.key.weight"], hf_layer.key.weight)
    assert {n for n, _ in ours_from(config, state).named_parameters()} == {
        n for n, _ in hf_pretraining.named_parameters()
    }


def test_export_hf_loads_with_no_missing_keys_and_same_logits(tmp_path: Path) -> None:
    ours = randomise(BertForPreTraining(CONFIG, seed=5), 2)
    out = export_hf(ours, CONFIG, TOKENS, tmp_path / "hf", do_lower_case=True)
    hf, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    hf.eval()
    assert_same_outputs(ours, hf, inputs(1))
    # the tied decoder really is the exported word embedding in HF too (ours at its real rows: see pad_vocab)
    mine = ours.state_dict()
    assert torch.equal(hf.cls.predictions.decoder.weight, mine["bert.embeddings.word_embeddings.weight"])
    assert torch.equal(hf.cls.predictions.decoder.bias, mine["cls.predictions.bias"])

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["BertForPreTraining"] and cfg["model_type"] == "bert"
    assert cfg["hidden_act"] == "gelu" and cfg["num_hidden_layers"] == 3 and cfg["intermediate_size"] == 80
    assert Vocab.load(out / "vocab.txt").sha256 == vocab_sha256(TOKENS)
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is True
    # and back: our loader reads our export to the identical state
    config, state, report = load_hf(out)
    assert config == CONFIG and report.fresh == () and report.vocab_sha256 == vocab_sha256(TOKENS)
    for key, value in ours.state_dict().items():
        assert torch.equal(state[key], value), key


def test_export_then_reload_hf_round_trip_is_bit_exact(tmp_path: Path, hf_pretraining: torch.nn.Module) -> None:
    hf_pretraining.save_pretrained(tmp_path / "a")
    config, state, _ = load_hf(tmp_path / "a")
    export_hf(state, config, TOKENS, tmp_path / "b")
    a = load_file(tmp_path / "a" / "model.safetensors")
    b = load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_load_pytorch_model_bin_with_tied_keys(tmp_path: Path, hf_pretraining: torch.nn.Module) -> None:
    # An older-style checkpoint: pickled tensors, tied decoder copies and the position_ids buffer included.
    hf_state = dict(hf_pretraining.state_dict())
    hf_state["bert.embeddings.position_ids"] = torch.arange(CONFIG.max_position_embeddings)[None]
    assert "cls.predictions.decoder.weight" in hf_state
    torch.save(hf_state, tmp_path / "pytorch_model.bin")
    hf_pretraining.config.save_pretrained(tmp_path)
    config, state, report = load_hf(tmp_path)
    assert report.source.endswith("pytorch_model.bin") and report.fresh == ()
    assert {k for k, _ in report.ignored} == {
        "bert.embeddings.position_ids",
        "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias",
    }
    assert_same_outputs(ours_from(config, state), hf_pretraining, inputs(2))


class _NotATensor:
    pass


def test_pytorch_model_bin_is_never_unpickled(tmp_path: Path) -> None:
    torch.save({"weights": _NotATensor()}, tmp_path / "pytorch_model.bin")
    hf_config().save_pretrained(tmp_path)
    with pytest.raises(HFCheckpointError, match="pytorch_model.bin: cannot be read as a plain tensor dict"):
        load_hf(tmp_path)


def test_encoder_only_checkpoint_gets_fresh_heads(tmp_path: Path) -> None:
    torch.manual_seed(0)
    hf = randomise(transformers.BertModel(hf_config()), 3)
    hf.save_pretrained(tmp_path)
    rng = torch.random.get_rng_state()
    config, state, report = load_hf(tmp_path, seed=7)
    assert torch.equal(torch.random.get_rng_state(), rng), "fresh heads must not draw from the global RNG"
    assert set(report.fresh) == {
        "cls.predictions.bias",
        "cls.predictions.transform.dense.weight",
        "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.transform.LayerNorm.bias",
        "cls.seq_relationship.weight",
        "cls.seq_relationship.bias",
    }
    assert "initialised fresh (7)" in str(report)
    ours = ours_from(config, state)
    x = inputs(3)
    real = x["attention_mask"].bool()
    with torch.no_grad():
        seq, pooled = ours.bert(**{k: x[k] for k in ("input_ids", "token_type_ids", "attention_mask")})
        ref = hf(**x)
    torch.testing.assert_close(seq[real], ref.last_hidden_state[real], **TOL)
    torch.testing.assert_close(pooled, ref.pooler_output, **TOL)
    # fresh heads are the seed's own heads, not zeros or leftovers
    fresh = BertForPreTraining(config, seed=7).state_dict()
    for key in report.fresh:
        assert torch.equal(state[key], fresh[key]), key
    assert state["cls.predictions.transform.dense.weight"].std() > 0.01


def test_masked_lm_checkpoint_keeps_mlm_head_and_gets_fresh_pooler_and_nsp(tmp_path: Path) -> None:
    torch.manual_seed(0)
    hf = randomise(transformers.BertForMaskedLM(hf_config()), 4)
    hf.save_pretrained(tmp_path)
    config, state, report = load_hf(tmp_path)
    assert set(report.fresh) == {
        "bert.pooler.dense.weight",
        "bert.pooler.dense.bias",
        "cls.seq_relationship.weight",
        "cls.seq_relationship.bias",
    }
    ours = ours_from(config, state)
    x = inputs(4)
    real = x["attention_mask"].bool()
    with torch.no_grad():
        mlm, _ = ours.logits(**x)
        ref = hf(**x).logits
    torch.testing.assert_close(mlm[real], ref[real], **TOL)


def test_sequence_classification_checkpoint_ignores_classifier(tmp_path: Path) -> None:
    torch.manual_seed(0)
    hf = randomise(transformers.BertForSequenceClassification(hf_config()), 5)
    hf.save_pretrained(tmp_path)
    config, state, report = load_hf(tmp_path)
    assert {k for k, _ in report.ignored} == {"classifier.weight", "classifier.bias"}
    assert all(k.startswith("cls.") for k in report.fresh) and len(report.fresh) == 7
    assert "classifier.weight: not part of BertForPreTraining" in str(report)
    ours = ours_from(config, state)
    x = inputs(5)
    with torch.no_grad():
        torch.testing.assert_close(ours.bert(**x)[1], hf.bert(**x).pooler_output, **TOL)


def test_legacy_names_gamma_beta_and_unprefixed_keys(tmp_path: Path) -> None:
    torch.manual_seed(0)
    hf = randomise(transformers.BertModel(hf_config()), 6)
    legacy = {}
    for key, value in hf.state_dict().items():
        key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        legacy[key] = value.clone()
    assert "embeddings.LayerNorm.gamma" in legacy
    save_file(legacy, str(tmp_path / "model.safetensors"))
    data = hf_config_dict(CONFIG)
    del data["model_type"]  # Google's bert_config.json has none
    (tmp_path / "config.json").write_text(json.dumps(data))
    config, state, report = load_hf(tmp_path)
    assert any("no model_type" in note for note in report.notes)
    ours = ours_from(config, state)
    x = inputs(6)
    with torch.no_grad():
        torch.testing.assert_close(ours.bert(**x)[1], hf(**x).pooler_output, **TOL)


def test_export_checkpoint_folder(tmp_path: Path) -> None:
    ours = randomise(BertForPreTraining(CONFIG, seed=9), 7)
    ckpt = tmp_path / "step_100"
    ckpt.mkdir()
    save_file(ours.state_dict(), str(ckpt / "model.safetensors"))
    (ckpt / "config.json").write_text(json.dumps({"model": CONFIG.to_dict(), "do_lower_case": False, "step": 100}))
    Vocab(TOKENS).write(ckpt / "vocab.txt")
    out = export_checkpoint(ckpt, tmp_path / "hf")
    hf, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert_same_outputs(ours, hf.eval(), inputs(7))
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is False

    (ckpt / "vocab.txt").unlink()
    with pytest.raises(HFCheckpointError, match="checkpoint lacks vocab.txt"):
        export_checkpoint(ckpt, tmp_path / "hf2")
    with pytest.raises(HFCheckpointError, match="does not exist"):
        export_checkpoint(tmp_path / "nowhere", tmp_path / "hf3")


def test_errors(tmp_path: Path, hf_pretraining: torch.nn.Module) -> None:
    with pytest.raises(HFCheckpointError, match="checkpoint folder does not exist"):
        load_hf(tmp_path / "missing")
    with pytest.raises(HFCheckpointError, match="has no config.json"):
        load_hf(tmp_path)

    roberta = tmp_path / "roberta"
    hf_pretraining.save_pretrained(roberta)
    cfg = json.loads((roberta / "config.json").read_text())
    (roberta / "config.json").write_text(json.dumps({**cfg, "model_type": "roberta"}))
    with pytest.raises(HFCheckpointError, match="model_type is 'roberta', not 'bert'"):
        load_hf(roberta)
    (roberta / "config.json").write_text(json.dumps({**cfg, "hidden_act": "relu"}))
    with pytest.raises(HFCheckpointError, match="hidden_act='relu' is not supported"):
        load_hf(roberta)

    # config says 64 positions, weights hold 40: the error names the key and both shapes
    (roberta / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 64}))
    bad_shape = r"bert.embeddings.position_embeddings.weight has shape \(40, 48\), expected \(64, 48\)"
    with pytest.raises(HFCheckpointError, match=bad_shape):
        load_hf(roberta)
    (roberta / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 96}))
    bad_shape = r"layer.0.intermediate.dense.(weight|bias) has shape \(80,( 48)?\), expected \(96,( 48)?\)"
    with pytest.raises(HFCheckpointError, match=bad_shape):
        load_hf(roberta)
    (roberta / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 2}))
    with pytest.raises(HFCheckpointError, match="encoder key 'bert.encoder.layer.2.*no counterpart"):
        load_hf(roberta)
    (roberta / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 4}))
    with pytest.raises(HFCheckpointError, match="lacks encoder weight.*bert.encoder.layer.3"):
        load_hf(roberta)
    (roberta / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 5}))
    with pytest.raises(HFCheckpointError, match="hidden_size=48 is not divisible by num_heads=5"):
        load_hf(roberta)

    empty = tmp_path / "noweights"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFCheckpointError, match="holds neither model.safetensors nor pytorch_model.bin"):
        load_hf(empty)

    ours = BertForPreTraining(CONFIG)
    state = ours.state_dict()
    with pytest.raises(HFCheckpointError, match=r"missing \['cls.seq_relationship.bias'\]"):
        export_hf({k: v for k, v in state.items() if k != "cls.seq_relationship.bias"}, CONFIG, TOKENS, tmp_path / "x")
    with pytest.raises(HFCheckpointError, match="vocabulary has 121 tokens but vocab_size is 120"):
        export_hf(ours, CONFIG, (*TOKENS, "extra"), tmp_path / "x")


def test_state_dict_names_are_hf_names() -> None:
    state = BertForPreTraining(CONFIG).state_dict()
    assert to_hf_state_dict(state).keys() == state.keys()
    assert "bert.encoder.layer.0.attention.self.query.weight" in state and not any(".qkv." in k for k in state)


@pytest.mark.shared_data
def test_export_serves_real_text_through_hf_tokenizer(tmp_path: Path) -> None:
    """A WordPiece vocab trained on BERT's sample text, exported with the model: HF's own tokenizer loads from
    the folder (lower-casing as configured) and HF's model gives our logits on the real sentence pair."""
    sample = DATA / "pretrain" / "sample_text.txt"
    if not sample.is_file():
        pytest.skip(f"shared data not found at {sample}")
    from tokenizers import BertWordPieceTokenizer

    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train([str(sample)], vocab_size=300, min_frequency=1, show_progress=False)
    tokens = [t for t, _ in sorted(wordpiece.get_vocab().items(), key=lambda kv: kv[1])]
    config = BertConfig(vocab_size=len(tokens), hidden_size=32, num_layers=2, num_heads=2, max_position_embeddings=128)
    ours = randomise(BertForPreTraining(config, seed=11), 8)
    out = export_hf(ours, config, tokens, tmp_path / "hf", do_lower_case=True)

    lines = [line.strip() for line in sample.read_text(encoding="utf-8").splitlines() if line.strip()]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    enc = tokenizer(
        [lines[0], lines[5]], [lines[1], lines[6]], padding=True, truncation=True, max_length=128, return_tensors="pt"
    )
    assert enc["attention_mask"].sum() > 20 and (enc["attention_mask"] == 0).any()  # real text, with padding
    assert tokenizer.convert_ids_to_tokens(tokenizer("The")["input_ids"])[1] == "the"
    hf = transformers.BertForPreTraining.from_pretrained(out).eval()
    x = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    assert_same_outputs(ours, hf, x)
    # the trunk alone equals the trunk inside the pretraining model
    trunk = BertModel(config)
    trunk.load_state_dict({k.removeprefix("bert."): v for k, v in ours.state_dict().items() if k.startswith("bert.")})
    with torch.no_grad():
        torch.testing.assert_close(trunk.eval()(**x)[0], ours.bert(**x)[0], rtol=0, atol=0)


def test_an_exported_run_loads_with_auto_classes_and_fills_masks(demo_shards: Path, demo_corpus: Path, tmp_path: Path):
    """A real (tiny, 2-step) pretraining run, exported: its tokenizer.json is the fast tokenizer AutoTokenizer
    would build from vocab.txt (and loads with vocab.txt gone: no conversion), AutoModelForMaskedLM gives our
    MLM logits, and pipeline("fill-mask") answers with vocabulary words."""
    from bertstream.trainer.config import TrainConfig
    from bertstream.trainer.pretrain.loop import pretrain

    run = tmp_path / "run"
    pretrain(
        TrainConfig.build(
            **{"paths": (str(demo_shards),), "output": str(run), "preset": "tiny", "batch_size": 4},
            **{"max_steps": 2, "checkpoint_every": 2, "num_workers": 0, "tensorboard": False},
        )
    )
    out = export_checkpoint(run / "checkpoints" / "step-0000002", tmp_path / "hf")
    assert (out / "tokenizer.json").is_file()
    lowercase = json.loads((run / "config.json").read_text())["lowercase"]  # the shards' vocabulary casing
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is lowercase

    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(demo_corpus.glob("*.txt"))[:3])
    lines = [line for line in text.splitlines() if line.strip()][:50]
    import shutil

    converted = tmp_path / "without_tokenizer_json"  # what AutoTokenizer builds from vocab.txt by conversion
    shutil.copytree(out, converted)
    (converted / "tokenizer.json").unlink()
    reference = transformers.AutoTokenizer.from_pretrained(converted)
    (out / "vocab.txt").rename(tmp_path / "vocab.txt")  # the export must not need a conversion from vocab.txt
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.is_fast and tokenizer.model_max_length == 512
    assert tokenizer(lines[:40], lines[10:50])["input_ids"] == reference(lines[:40], lines[10:50])["input_ids"]
    assert (
        tokenizer(lines[:40], lines[10:50])["token_type_ids"] == reference(lines[:40], lines[10:50])["token_type_ids"]
    )
    (tmp_path / "vocab.txt").rename(out / "vocab.txt")

    mlm = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
    enc = tokenizer(lines[:3], padding=True, return_tensors="pt")
    ours = BertForPreTraining(BertConfig.from_dict(json.loads((run / "config.json").read_text())["model"]))
    ours.load_state_dict(load_file(run / "checkpoints" / "step-0000002" / "model.safetensors"))
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        logits = ours.eval().logits(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])[0]
        torch.testing.assert_close(mlm(**enc).logits[real], logits[real], **TOL)

    fill = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out), device="cpu")
    answers = fill(f"the python {tokenizer.mask_token} is a list")
    assert len(answers) == 5 and all(a["token_str"] and a["sequence"].startswith("the python") for a in answers)
    assert sorted(a["score"] for a in answers)[::-1] == [a["score"] for a in answers]


def test_export_hf_writes_only_a_folder_of_its_own_and_all_of_it_or_nothing(tmp_path: Path, monkeypatch) -> None:
    """Commands own what they write (issue 33): export-hf replaced a dataset copy's vocab.txt and a user's
    config.json, and left an empty folder on a full disk."""
    import errno

    import bertstream.trainer.hf.export as hf_module

    ours = BertForPreTraining(CONFIG, seed=5)
    dataset = tmp_path / "ds"
    dataset.mkdir()
    (dataset / "manifest.json").write_text("{}")
    (dataset / "vocab.txt").write_text("mine\n")
    with pytest.raises(
        HFCheckpointError, match="ds holds files that are not a Hugging Face export \\(manifest.json\\)"
    ):
        export_hf(ours, CONFIG, TOKENS, dataset, overwrite=True)
    assert (dataset / "vocab.txt").read_text() == "mine\n"
    user = tmp_path / "user"
    user.mkdir()
    (user / "config.json").write_text("{}")
    with pytest.raises(HFCheckpointError, match="already holds config.json, .* export would replace: pass --overwrite"):
        export_hf(ours, CONFIG, TOKENS, user)
    assert (user / "config.json").read_text() == "{}"
    assert load_hf(export_hf(ours, CONFIG, TOKENS, user, overwrite=True))[0] == CONFIG

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hf_module, "with_bert_template", disk_full)  # the last file, after the weights
    with pytest.raises(HFCheckpointError, match="cannot write the export to .*new: No space left on device"):
        export_hf(ours, CONFIG, TOKENS, tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "user"]  # no folder, no temporary one left


def test_every_exported_file_has_the_folders_mode(tmp_path: Path) -> None:
    """safetensors writes its file 0600 whatever the umask; an export is made to be served or shared, so its weights
    are as readable as the config.json beside them (0644 under umask 022, 0640 under 027)."""
    import os
    import stat

    previous = os.umask(0o027)
    try:
        out = export_hf(BertForPreTraining(CONFIG, seed=1), CONFIG, TOKENS, tmp_path / "hf")
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir() if p.is_file()}
    assert modes["model.safetensors"] == modes["config.json"] == 0o640, modes
