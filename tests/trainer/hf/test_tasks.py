"""A fine-tuned model leaves bertstream: each task kind, post-LN and pre-LN, exported as its ``transformers`` Auto
class, computes our logits; the token-classification pipeline gives our entities and a reader our spans; the export is read back by ``--init``. Tiny models made here (the SST-2 run's test is in
``tests/trainer/finetune/test_export.py``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertstream.schemas import tasks as T
from bertstream.schemas.tasks import NO_OFFSET
from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab
from bertstream.trainer.finetune import metrics as M
from bertstream.trainer.finetune.squad import Window, best_span
from bertstream.trainer.finetune.tasks import HF_HEADS, TASKS, get_task
from bertstream.trainer.hf.config import HFCheckpointError
from bertstream.trainer.hf.export import export_checkpoint, export_hf
from bertstream.trainer.hf.load import load_hf
from tests.trainer.finetune.hf_fixtures import CONFIG, batch, randomise

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
TOL = {"rtol": 0.0, "atol": 1e-4}
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
WORDS = ["the", "cat", "sat", "on", "new", "york", "mat", "dog", "ran", "to", "paris", "who", "where", "what"]
PIECES = ["##s", "##ed", "##ing", "##er"]
# Real words and sub-word pieces (so the pipelines' word grouping is exercised), then filler up to the size
VOCAB = Vocab(
    (*SPECIAL_TOKENS, *WORDS, *PIECES, *(f"tok{i}" for i in range(CONFIG.vocab_size - 5 - len(WORDS) - len(PIECES))))
)
NORMS = {"post": CONFIG, "pre": dataclasses.replace(CONFIG, norm_placement="pre")}
AUTO = {kind: "AutoModel" + get_task(kind).hf.suffix for kind in TASKS}  # the Auto class of each kind's class
LABELS = {T.CLASSIFICATION: ["neg", "neu", "pos"], T.REGRESSION: [], T.NER: NER_LABELS, T.SQUAD: []}


def ours(kind: str, norm: str, seed: int = 3) -> torch.nn.Module:
    return randomise(get_task(kind).build_model(NORMS[norm], len(LABELS[kind]), seed=seed), seed)


def export(kind: str, norm: str, out: Path) -> torch.nn.Module:
    model = ours(kind, norm)
    export_hf(model.state_dict(), NORMS[norm], VOCAB, out, task=get_task(kind).hf, labels=LABELS[kind])
    return model


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("kind", list(TASKS))
def test_each_kind_loads_as_its_auto_class_with_our_logits(kind, norm, tmp_path):
    model = export(kind, norm, tmp_path / "hf")
    hf, info = getattr(transformers, AUTO[kind]).from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert type(hf).__name__ == json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"][0]
    assert type(hf).__name__.startswith("RobertaPreLayerNorm" if norm == "pre" else "Bert")
    b = batch()
    with torch.no_grad():
        mine, theirs = model(b), hf.eval()(**b)
    real = b["attention_mask"].bool()
    if kind == T.SQUAD:  # per token: the real tokens (padding logits are never read)
        torch.testing.assert_close(theirs.start_logits[real], mine["start_logits"][real], **TOL)
        torch.testing.assert_close(theirs.end_logits[real], mine["end_logits"][real], **TOL)
    elif kind == T.NER:
        torch.testing.assert_close(theirs.logits[real], mine["logits"][real], **TOL)
    else:
        torch.testing.assert_close(theirs.logits.reshape(mine["logits"].shape), mine["logits"], **TOL)
    config = hf.config
    if kind == T.CLASSIFICATION:
        assert config.id2label == {0: "neg", 1: "neu", 2: "pos"} and config.label2id["pos"] == 2
    if kind == T.REGRESSION:
        assert config.num_labels == 1 and config.problem_type == "regression"
    if kind == T.NER:
        assert list(config.id2label.values()) == NER_LABELS


def encode(tok, *text: str) -> tuple[dict[str, torch.Tensor], object]:
    enc = tok(*text, return_tensors="pt")
    return {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}, enc


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_token_classification_pipeline_gives_our_entities(norm, tmp_path):
    model = export(T.NER, norm, tmp_path / "hf")
    pipe = transformers.pipeline("token-classification", model=str(tmp_path / "hf"), aggregation_strategy="first")
    found = 0
    for sentence in ["the cats sat on new york mats", "who ran to paris", "the dogs ran on the mat to new york"]:
        expected = our_entities(model, pipe.tokenizer, sentence)
        assert {(e["entity_group"], sentence[e["start"] : e["end"]]) for e in pipe(sentence)} == expected
        found += len(expected)
    assert found > 0  # the sample has entities to compare
    assert len(pipe.tokenizer("the cats sat on new york mats")["input_ids"]) > 7 + 2  # words of several sub-tokens


def our_entities(model: torch.nn.Module, tok, sentence: str) -> set[tuple[str, str]]:
    """(type, words) of each entity our tagger finds: the tag of each word's first sub-token, chunked as
    conlleval (what ``predictions.conll`` and our F1 read)."""
    words = sentence.split()
    inputs, enc = encode(tok, sentence)
    with torch.no_grad():
        logits = model(inputs)["logits"][0]  # [T, C]
    word_ids = enc.word_ids(0)
    first = [word_ids.index(w) for w in range(len(words))]  # our labels sit on each word's first sub-token
    tags = [NER_LABELS[int(logits[i].argmax())] for i in first]
    return {(kind, " ".join(words[s : e + 1])) for kind, s, e in M.chunks(tags)}


def served_answer(folder: Path, question: str, context: str, max_answer_len: int = 15) -> str:
    """What a server does with an exported reader: ``transformers``' question-answering pipeline where the
    installed version has it (4.x; 5.x removed it), else the same thing by hand on ``AutoModelForQuestionAnswering``:
    the context span (end >= start, at most ``max_answer_len`` tokens) of highest start + end logit."""
    from transformers.pipelines import SUPPORTED_TASKS

    if "question-answering" in SUPPORTED_TASKS:
        pipe = transformers.pipeline("question-answering", model=str(folder))
        return pipe(question=question, context=context, max_answer_len=max_answer_len)["answer"]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    enc = tok(question, context, return_tensors="pt", return_offsets_mapping=True)
    offsets = enc.pop("offset_mapping")[0].tolist()
    with torch.no_grad():
        out = model(**enc)
    start, end = out.start_logits[0].tolist(), out.end_logits[0].tolist()
    ctx = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
    pairs = [(i, j) for i in ctx for j in ctx if i <= j < i + max_answer_len]
    i, j = max(pairs, key=lambda p: start[p[0]] + end[p[1]])
    return context[offsets[i][0] : offsets[j][1]]


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_an_exported_reader_gives_our_spans(norm, tmp_path):
    model = export(T.SQUAD, norm, tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    context = "the cat sat on the mat . the dogs ran to paris and new york"
    answers = set()
    for question in ["who sat on the mat", "where ran the dogs", "what cat", "who ran to new york"]:
        inputs, enc = encode(tok, question, context)
        with torch.no_grad():
            out = model(inputs)
        in_context = np.array([s == 1 for s in enc.sequence_ids(0)])
        offsets = np.array([enc.token_to_chars(0, i) or (0, 0) for i in range(len(in_context))])
        window = Window(
            out["start_logits"][0].numpy(),
            out["end_logits"][0].numpy(),
            np.where(in_context, offsets[:, 0], NO_OFFSET),
            np.where(in_context, offsets[:, 1], NO_OFFSET),
            np.ones(len(in_context), dtype=np.int8),
        )
        span = best_span([window], n_best=20, max_answer_length=15)  # our decoding, on our model's logits
        assert span is not None
        ours = span.text(context, [window])
        assert served_answer(tmp_path / "hf", question, context) == ours
        answers.add(ours)
    assert len(answers) > 1  # the spans differ by question: not one constant answer


def test_a_mean_pooled_head_and_a_wrong_label_list_are_refused(tmp_path):
    model = ours(T.CLASSIFICATION, "post")
    with pytest.raises(HFCheckpointError, match=r"classifier.weight has shape \(3, 48\), expected \(2, 48\)"):
        export_hf(
            model.state_dict(), CONFIG, VOCAB, tmp_path / "a", task=get_task(T.CLASSIFICATION).hf, labels=["a", "b"]
        )
    ckpt = tmp_path / "run" / "checkpoints" / "step-0000001"
    ckpt.mkdir(parents=True)
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, ckpt / "model.safetensors")
    VOCAB.write(ckpt / "vocab.txt")
    task = {"kind": T.CLASSIFICATION, "labels": LABELS[T.CLASSIFICATION]}
    config = {"model": CONFIG.to_dict(), "finetune": {"pooling": "mean"}, "task": task}
    (ckpt / "config.json").write_text(json.dumps(config))
    with pytest.raises(HFCheckpointError, match=r"--pooling mean"):
        export_checkpoint(tmp_path / "run", tmp_path / "out", heads=HF_HEADS)
    assert not (tmp_path / "out").exists()
    config["finetune"]["pooling"] = "cls"
    (ckpt / "config.json").write_text(json.dumps(config))
    export_checkpoint(tmp_path / "run", tmp_path / "out", heads=HF_HEADS)
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    assert hf["architectures"] == ["BertForSequenceClassification"] and hf["label2id"] == {"neg": 0, "neu": 1, "pos": 2}
    assert (tmp_path / "out" / "tokenizer.json").is_file()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_an_export_is_read_back_as_the_same_encoder_and_the_head_is_named(norm, tmp_path):
    model = export(T.CLASSIFICATION, norm, tmp_path / "hf")
    config, state, report = load_hf(tmp_path / "hf", heads=HF_HEADS)
    assert config == NORMS[norm]
    mine = model.state_dict()
    encoder = [k for k in mine if k.startswith("bert.") and (norm == "post" or not k.startswith("bert.pooler."))]
    for k in encoder:
        torch.testing.assert_close(state[k], mine[k], rtol=0, atol=0)
    assert report.head == (T.CLASSIFICATION, ("neg", "neu", "pos"), "cls")  # what --init compares with its task
    for k in ("classifier.weight", "classifier.bias"):
        torch.testing.assert_close(report.head_state[k], mine[k], rtol=0, atol=0)
    assert not any(k.startswith("classifier.") for k in state)  # the state stays BertForPreTraining's


FRESH = """
import json, sys
import torch, transformers
transformers.logging.set_verbosity_error()
cls, ner, qa = sys.argv[1:4]
tok = transformers.AutoTokenizer.from_pretrained(qa)
reader = transformers.AutoModelForQuestionAnswering.from_pretrained(qa).eval()
with torch.no_grad():
    logits = reader(**tok("who sat", "the cat sat on the mat", return_tensors="pt"))
out = {
    "cls": transformers.pipeline("text-classification", model=cls)("the cat sat on the mat"),
    "ner": transformers.pipeline("token-classification", model=ner, aggregation_strategy="first")(SENTENCE),
    "qa": [logits.start_logits[0].tolist(), logits.end_logits[0].tolist()],
}
print(json.dumps(out, default=float))
""".replace("SENTENCE", repr("the cats sat on new york mats"))


def test_a_classifier_a_tagger_and_a_reader_serve_in_a_fresh_python(tmp_path):
    """What a user does after ``export-hf``: a new interpreter that knows nothing of bertstream."""
    import subprocess
    import sys

    folders = [tmp_path / kind for kind in (T.CLASSIFICATION, T.NER, T.SQUAD)]
    models = [export(kind, "post", folder) for kind, folder in zip((T.CLASSIFICATION, T.NER, T.SQUAD), folders)]
    reader = models[2]
    done = subprocess.run(
        [sys.executable, "-c", FRESH, *map(str, folders)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    tok = transformers.AutoTokenizer.from_pretrained(folders[2])
    inputs, _ = encode(tok, "the cat sat on the mat")
    with torch.no_grad():
        label = LABELS[T.CLASSIFICATION][int(models[0](inputs)["logits"][0].argmax())]
    assert got["cls"][0]["label"] == label
    sentence = "the cats sat on new york mats"
    assert {(e["entity_group"], sentence[e["start"] : e["end"]]) for e in got["ner"]} == our_entities(
        models[1], tok, sentence
    )
    inputs, _ = encode(tok, "who sat", "the cat sat on the mat")
    with torch.no_grad():
        mine = reader(inputs)
    np.testing.assert_allclose(got["qa"][0], mine["start_logits"][0].numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(got["qa"][1], mine["end_logits"][0].numpy(), rtol=0, atol=1e-4)


def test_init_reuses_an_exported_head_only_for_its_own_task_labels_and_pooling(tmp_path):
    from bertstream.trainer.finetune.heads import reuse_head
    from bertstream.trainer.weights import resolve_init

    exported = export(T.CLASSIFICATION, "pre", tmp_path / "hf")
    init = resolve_init(str(tmp_path / "hf"), None, heads=HF_HEADS, flag="--init")
    assert init.head is not None and init.head.trained_for == (T.CLASSIFICATION, ("neg", "neu", "pos"), "cls")
    assert init.state is not None and not any(k.startswith("classifier.") for k in init.state)  # (--init-from)
    same = (T.CLASSIFICATION, ("neg", "neu", "pos"), "cls")
    for wanted in (same, (T.CLASSIFICATION, ("neg", "pos", "neu"), "cls"), (*same[:2], "mean")):
        model = ours(T.CLASSIFICATION, "pre", seed=9)
        fresh = model.classifier.weight.detach().clone()
        note = reuse_head(model, init.head, wanted, pooled=True)
        head = model.classifier.weight.detach()
        if wanted == same:
            assert note is not None and note.startswith("task head reused")
            torch.testing.assert_close(head, exported.classifier.weight.detach(), rtol=0, atol=0)
        else:
            assert note is not None and note.startswith("task head initialised fresh") and torch.equal(head, fresh)
    tagger = ours(T.NER, "pre", seed=9)
    note = reuse_head(tagger, init.head, (T.NER, tuple(NER_LABELS), "cls"), pooled=False)
    assert note is not None and "for classification with labels ['neg', 'neu', 'pos']" in note
