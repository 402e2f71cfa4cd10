"""--init: our checkpoint or run folder, a Hugging Face folder, random:PRESET; the vocabulary check."""

from __future__ import annotations

import json

import pytest
import torch

from bertstream.schemas import tasks as T
from bertstream.schemas.vocab import VocabMismatchError
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.finetune.heads import load_encoder_state
from bertstream.trainer.finetune.tasks import get_task
from bertstream.trainer.model import BertForPreTraining
from bertstream.trainer.weights import InitError, check_vocab, resolve_init
from tests.fuzz import mutate
from tests.trainer.finetune.hf_fixtures import CONFIG, VOCAB, save_hf


def saved_checkpoint(run, config):
    """A pretraining checkpoint of a fresh ``config`` model at step 40: (model, checkpoint folder)."""
    pre = BertForPreTraining(config, seed=7)
    path = ckpt.save(
        run,
        40,
        model_state=pre.state_dict(),
        optimizer=None,
        rng={},
        state={},
        config={"model": config.to_dict()},
        vocab_text=VOCAB.text(),
        keep=1,
    )
    return pre, path


def test_init_from_our_checkpoint_run_folder_and_random(tmp_path):
    pre, path = saved_checkpoint(tmp_path / "run", CONFIG)
    for spec in (str(path), str(tmp_path / "run")):  # the checkpoint, or the run folder (its newest checkpoint)
        init = resolve_init(spec, VOCAB, flag="--init")
        assert init.kind == "checkpoint" and init.source == str(path) and init.config == CONFIG
        model = get_task(T.NER).build_model(init.config, 5, seed=0)
        load_encoder_state(model, init.state, spec)
        for k, v in model.bert.state_dict().items():
            assert torch.equal(v, pre.bert.state_dict()[k]), k
    (path / "state.json").unlink()  # the three files the format names are enough
    assert resolve_init(str(path), VOCAB, flag="--init").state.keys() == pre.state_dict().keys()
    (path / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(InitError, match="cannot be read"):
        resolve_init(str(path), VOCAB, flag="--init")
    rand = resolve_init("random:mini", VOCAB, flag="--init")
    assert rand.state is None and rand.config.hidden_size == 256 and rand.config.vocab_size == len(VOCAB)
    with pytest.raises(InitError, match="unknown preset 'huge'"):
        resolve_init("random:huge", VOCAB, flag="--init")
    with pytest.raises(InitError, match="not a folder"):
        resolve_init(str(tmp_path / "nowhere"), VOCAB, flag="--init")


def test_vocab_mismatch_names_both_hashes_and_the_fix(tmp_path):
    pytest.importorskip("transformers")
    save_hf(T.CLASSIFICATION, tmp_path / "hf", seed=1)
    init = resolve_init(str(tmp_path / "hf"), VOCAB, flag="--init")
    check_vocab(init, VOCAB.sha256, "data", flag="--init")  # same tokenizer: fine
    with pytest.raises(VocabMismatchError) as e:
        check_vocab(init, "f" * 64, "/data/sst2", flag="--init")
    msg = str(e.value)
    assert "f" * 64 in msg and VOCAB.sha256 in msg and f"--vocab {tmp_path / 'hf' / 'vocab.txt'}" in msg


def test_random_like_a_checkpoint_takes_its_architecture_not_its_weights(tmp_path):
    import dataclasses

    config = dataclasses.replace(CONFIG, norm_placement="pre")  # a shape no preset has
    _, path = saved_checkpoint(tmp_path / "run", config)
    init = resolve_init(f"random:{path}", VOCAB, flag="--init")
    assert init.kind == "random" and init.state is None and init.config == config
    assert "architecture" in init.notes[0]
    (path / "model.safetensors").unlink()  # only the architecture is read: the baseline needs no weights
    assert resolve_init(f"random:{path}", VOCAB, flag="--init").config == config
    with pytest.raises(InitError, match="unknown preset .* or random:CHECKPOINT"):
        resolve_init(f"random:{tmp_path / 'nowhere'}", VOCAB, flag="--init")


def test_what_is_read_is_what_is_meant_weights_dtypes_shapes_and_step(tmp_path):
    """Issue 33: int8 or bool weights were cast (first loss 6,449), a config.json that disagrees with its
    weights was a traceback, state.json step -5 resumed and wrote step--000004."""
    import json

    from safetensors.torch import load_file, save_file

    _, path = saved_checkpoint(tmp_path / "run", CONFIG)
    good = load_file(str(path / "model.safetensors"))
    key = "bert.encoder.layer.0.attention.self.query.weight"
    for dtype in (torch.int8, torch.bool):
        save_file({**good, key: good[key].to(dtype)}, str(path / "model.safetensors"))
        with pytest.raises(InitError, match=f"not floating point \\({key} is torch.{str(dtype)[6:]}\\)"):
            resolve_init(str(path), VOCAB, flag="--init-from")
    save_file({**good, key: good[key][:, :-1].contiguous()}, str(path / "model.safetensors"))
    with pytest.raises(InitError, match=f"{key} has shape .* the config and the weights disagree"):
        resolve_init(str(path), VOCAB, flag="--init")
    save_file(good, str(path / "model.safetensors"))
    (path / "state.json").write_text(json.dumps({"step": -5}))
    with pytest.raises(ckpt.CheckpointError, match="step -5 is not a step count"):
        ckpt.load(path, with_optimizer=False)
    assert resolve_init(str(path), VOCAB, flag="--init").state.keys() == good.keys()


def test_random_without_a_name_is_no_folder():
    """``--init random:`` read the current folder as a checkpoint ("`.` has no config.json"; issue 33)."""
    with pytest.raises(InitError, match="unknown preset ''"):
        resolve_init("random:", VOCAB, flag="--init")


def _header_cases(data: bytes) -> list[bytes]:
    """A safetensors file with its header damaged: the length field, bytes of the JSON header, a shape, dtype or
    offset out of reach, truncations (issue 33: every binary reader advances or fails on every malformed header)."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    cases = [mutate(data, seed, 8 + n) for seed in range(120)]
    cases += [size.to_bytes(8, "little") + data[8:] for size in (0, 1, n - 1, n + 1, len(data), 2**40, 2**64 - 1)]
    cases += [data[:cut] for cut in (0, 7, 8, 8 + n // 2, 8 + n, len(data) - 1)]
    for field, value in (("shape", [10**12, 10**12]), ("shape", [-1]), ("dtype", "Q8"), ("data_offsets", [0, 2**62])):
        edited = {**header, name: {**header[name], field: value}}
        text = json.dumps(edited).encode()
        cases.append(len(text).to_bytes(8, "little") + text + data[8 + n :])
    return cases


def test_a_damaged_safetensors_header_fails_in_one_line_for_every_reader(tmp_path):
    """Our three callers of checkpoint.read_tensors (resume, --init, a Hugging Face folder) each either read the file
    or raise their own one-line error on a damaged header: never another exception, a hang or an allocation the
    size of a garbage field."""
    from bertstream.trainer.hf.load import HFCheckpointError
    from bertstream.trainer.hf.load import load_safetensors as _load_safetensors

    _, path = saved_checkpoint(tmp_path / "run", CONFIG)
    model = path / ckpt.MODEL_FILE
    good = model.read_bytes()
    failed = 0
    for case in _header_cases(good):
        model.write_bytes(case)
        for read, error in (
            (lambda: ckpt.load(path, with_optimizer=False), ckpt.CheckpointError),
            (lambda: resolve_init(str(path), VOCAB, flag="--init"), InitError),
            (lambda: _load_safetensors(model), HFCheckpointError),
        ):
            try:
                read()
            except error as e:
                assert "\n" not in str(e)
                failed += 1
    assert failed > 3 * 100  # nearly every case is refused, by all three
