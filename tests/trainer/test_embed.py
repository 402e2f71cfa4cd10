"""``berttrain embed``: parity with transformers' ``output_hidden_states``, the Arrow output, and bad flags."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.trainer.cli import main
from bertstream.trainer.embed import EmbedConfig, embed, layer_indices
from bertstream.trainer.errors import RunError
from bertstream.trainer.hf.config import hf_config_dict
from tests.trainer.finetune.hf_fixtures import CONFIG, VOCAB, randomise

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

SST2 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tasks" / "sst2" / "dev.tsv"
TOL = {"rtol": 0.0, "atol": 1e-4}
# Varied lengths (a blank line, one longer than --max-seq-length 12) so padding and truncation are exercised.
LINES = [
    "tok1 tok2 tok3",
    "",
    "TOK7 tok8",
    " ".join(f"tok{i}" for i in range(20, 40)),
    "tok5",
    "tok9 tok10 tok11 tok12",
]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("embed") / "hf"
    model = randomise(transformers.BertModel(transformers.BertConfig(**hf_config_dict(CONFIG))), seed=3)
    model.save_pretrained(folder)
    VOCAB.write(folder / "vocab.txt")
    return folder


@pytest.fixture(scope="module")
def text_file(hf_dir: Path) -> Path:
    path = hf_dir.parent / "texts.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def read(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as f:
        return pa.ipc.open_file(f).read_all()


def reference(hf_dir: Path, max_len: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """transformers' tokenizer and model on the same lines, padded together: (hidden states, attention mask)."""
    tok = transformers.BertTokenizerFast(str(hf_dir / "vocab.txt"), do_lower_case=True)
    enc = tok(LINES, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
    model = transformers.BertModel.from_pretrained(hf_dir).eval()
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    return list(out.hidden_states), enc["attention_mask"]


@pytest.mark.parametrize(
    ("layers", "combine", "pooling"),
    [
        ("-1", "mean", "cls"),
        ("-1", "mean", "mean"),
        ("-1", "mean", "none"),
        ("-2:", "sum", "mean"),
        ("0,2", "concat", "cls"),
        (":", "mean", "none"),
    ],
)
def test_parity_with_transformers(hf_dir, text_file, tmp_path, layers, combine, pooling):
    out = tmp_path / "e.arrow"
    embed(
        options.build(
            EmbedConfig,
            init=str(hf_dir),
            input=str(text_file),
            output=str(out),
            layers=layers,
            combine=combine,
            pooling=pooling,
            max_seq_length=12,
            batch_size=4,
            device="cpu",
        )
    )
    table = read(out)
    states, mask = reference(hf_dir, 12)
    picked = [states[i] for i in layer_indices(layers, CONFIG.num_layers)]
    x = (
        torch.cat(picked, -1)
        if combine == "concat"
        else torch.stack(picked).sum(0) / (len(picked) if combine == "mean" else 1)
    )
    lengths = mask.sum(1)
    assert table.column("index").to_pylist() == list(range(len(LINES)))
    assert table.column("num_tokens").to_pylist() == lengths.tolist()
    assert lengths[1] == 2 and lengths[3] == 12  # blank line kept as [CLS] [SEP]; long line truncated
    rows = table.column("embedding").to_pylist()
    for i, row in enumerate(rows):
        got = torch.tensor(np.array(row), dtype=torch.float32)
        n = int(lengths[i])
        want = {"cls": x[i, 0], "mean": x[i, :n].mean(0), "none": x[i, :n]}[pooling]
        torch.testing.assert_close(got, want, **TOL)
    width = CONFIG.hidden_size * (len(picked) if combine == "concat" else 1)
    value_type = table.schema.field("embedding").type
    if pooling == "none":
        assert pa.types.is_list(value_type) and value_type.value_type.list_size == width
    else:
        assert pa.types.is_fixed_size_list(value_type) and value_type.list_size == width


def test_layer_selection():
    assert layer_indices("-1", 4) == (4,)
    assert layer_indices("-4:", 4) == (1, 2, 3, 4)
    assert layer_indices("0,3,5", 5) == (0, 3, 5)
    with pytest.raises(UsageError, match="outside"):
        layer_indices("7", 4)
    with pytest.raises(UsageError, match="selects no layer"):
        layer_indices("3:1", 4)


def test_cli_on_real_lines_float16(hf_dir, tmp_path):
    if not SST2.is_file():
        pytest.skip(f"{SST2} is absent")
    lines = [line.split("\t")[0] for line in SST2.read_text(encoding="utf-8").splitlines()[1:9]]
    src = tmp_path / "sst2.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "sst2.arrow"
    args = [
        "embed",
        "--init",
        str(hf_dir),
        "--input",
        str(src),
        "--output",
        str(out),
        "--layers",
        "-2:",
        "--combine",
        "concat",
        "--pooling",
        "cls",
        "--dtype",
        "float16",
        "--device",
        "cpu",
        "--batch-size",
        "3",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    table = read(out)
    assert table.num_rows == len(lines)
    assert table.schema.field("embedding").type == pa.list_(pa.float16(), 2 * CONFIG.hidden_size)
    assert all(n >= 2 for n in table.column("num_tokens").to_pylist())
    assert not list(tmp_path.glob(".*tmp*"))  # the temporary file was renamed, not left behind
    again = CliRunner().invoke(main, args)  # an existing output is refused without --overwrite
    assert again.exit_code == 2 and "Error:" in again.output and "--overwrite" in again.output


@pytest.mark.parametrize(
    ("flags", "code", "needle"),
    [
        (["--pooling", "max"], 2, "--pooling"),
        (["--layers", "last"], 2, "--layers"),
        (["--layers", "9"], 2, "--layers"),
        (["--max-seq-length", "1"], 2, "--max-seq-length"),
        (["--max-seq-length", "4096"], 2, "max_position_embeddings"),
        (["--batch-size", "0"], 2, "--batch-size"),
        (["--device", "tpu"], 2, "--device"),
        (["--input", "/nonexistent/texts.txt"], 1, "no such file"),
        (["--init", "/nonexistent/model"], 1, "not a folder"),
    ],
)
def test_bad_arguments(hf_dir, text_file, tmp_path, flags, code, needle):
    args = {"--init": str(hf_dir), "--input": str(text_file), "--output": str(tmp_path / "o.arrow")}
    for flag, value in zip(flags[::2], flags[1::2]):
        args[flag] = value
    result = CliRunner().invoke(
        main, ["embed", *[x for kv in args.items() for x in kv], "--device", args.get("--device", "cpu")]
    )
    assert result.exit_code == code, result.output
    assert "Error:" in result.output and needle in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o.arrow").exists()


def test_task_dataset_with_our_checkpoint_matches_unpadded_rows(tmp_path):
    """A ``bertprep task`` folder read through the fine-tuning reader, embedded with our own checkpoint folder:
    each row's batched, padded vector equals the encoder run on that row alone."""
    if not SST2.is_file():
        pytest.skip(f"{SST2} is absent")
    from safetensors.torch import save_file

    from bertstream.schemas.vocab import SPECIAL_TOKENS, Vocab
    from bertstream.trainer.hf.convert import to_hf_state_dict
    from bertstream.trainer.model import BertConfig, BertForPreTraining
    from tests.jobs import run_classification

    rows = SST2.read_text(encoding="utf-8").splitlines()[:13]
    tsv = tmp_path / "dev.tsv"
    tsv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    words = sorted({w for r in rows[1:] for w in r.split("\t")[0].lower().split()})
    vocab = Vocab((*SPECIAL_TOKENS, *words))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    vocab.write(ckpt / "vocab.txt")
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=48,
        max_position_embeddings=64,
    )
    model = randomise(BertForPreTraining(config), seed=5)
    save_file(to_hf_state_dict(model.state_dict()), str(ckpt / "model.safetensors"))
    (ckpt / "config.json").write_text(__import__("json").dumps({"model": config.to_dict()}), encoding="utf-8")
    data = tmp_path / "dev_data"
    run_classification(
        inputs=[str(tsv)],
        vocab=str(ckpt / "vocab.txt"),
        output=str(data),
        glue="sst2",
        split="dev",
        max_seq_length=32,
    )
    out = tmp_path / "task.arrow"
    result = CliRunner().invoke(
        main,
        [
            "embed",
            "--init",
            str(ckpt),
            "--input",
            str(data),
            "--output",
            str(out),
            "--pooling",
            "cls",
            "--layers",
            "-1",
            "--batch-size",
            "5",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    table = read(out)
    assert table.num_rows == len(rows) - 1
    from bertstream.trainer.finetune.data import load_task_data
    from bertstream.trainer.finetune.tasks import get_task

    task = load_task_data(str(data), get_task("classification"))
    ids = task.columns["input_ids"]
    by_row = dict(zip(task.columns["row_id"].tolist(), range(len(task))))
    with torch.no_grad():
        for index, vec in zip(table.column("index").to_pylist(), table.column("embedding").to_pylist()):
            x = torch.from_numpy(ids[by_row[index]].astype(np.int64))[None]
            want = model.bert.hidden_states(x)[-1][0, 0]
            torch.testing.assert_close(torch.tensor(vec), want, **TOL)


def test_a_fifo_input_is_named_as_not_a_regular_file(hf_dir, tmp_path):
    import os

    fifo = tmp_path / "texts.fifo"
    os.mkfifo(fifo)
    result = CliRunner().invoke(
        main, ["embed", "--init", str(hf_dir), "--input", str(fifo), "--output", str(tmp_path / "o.arrow")]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"--input {fifo}: not a regular file" in result.output and "no such file" not in result.output


def test_an_output_that_is_an_input_is_refused_even_with_overwrite(hf_dir, text_file, tmp_path):
    texts = tmp_path / "texts.txt"
    shutil.copy(text_file, texts)
    before = texts.read_bytes()
    for flag, output in (("--input", texts), ("--init", hf_dir / "emb.arrow")):
        result = CliRunner().invoke(
            main, ["embed", "--init", str(hf_dir), "--input", str(texts), "--output", str(output), "--overwrite"]
        )
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert f"'--output': {output} overlaps inputs: it is (or lies inside) {flag}" in result.output
    assert texts.read_bytes() == before and not (hf_dir / "emb.arrow").exists()


def test_an_output_folder_is_refused_even_with_overwrite(hf_dir, text_file, tmp_path):
    """One line, always (issue 33): "--output DIR --overwrite" ended in ".ev.tmp: Is a directory"."""
    folder = tmp_path / "ev"
    folder.mkdir()
    result = CliRunner().invoke(
        main, ["embed", "--init", str(hf_dir), "--input", str(text_file), "--output", str(folder), "--overwrite"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"'--output': {folder} is a folder: --output names the Arrow file to write" in result.output


def test_text_lines_are_read_a_line_at_a_time_with_a_cap_and_tokenized_as_whole(hf_dir, tmp_path, monkeypatch):
    """Issue 44, bounded work: the file was read whole and every line tokenized whole (a 200 MB line took
    12.6 GB and ran past 2 minutes). A long line is tokenized up to a space past what --max-seq-length keeps (the
    same ids as the whole line's), and a line past MAX_LINE_BYTES is refused in one line naming it."""
    from bertstream.trainer import embed as E
    from bertstream.trainer.weights import resolve_init

    init = resolve_init(str(hf_dir), None, flag="--init")
    texts = tmp_path / "texts.txt"
    long_word = "tok" + "x" * 300  # past the tokenizer's longest word: one [UNK], however far a cut reaches
    texts.write_text("\n".join([*LINES, " ".join(LINES * 20), f"{long_word} tok1 tok2 tok3"]) + "\r\n")
    whole = {m: E.text_rows(str(texts), init, m) for m in (3, 6, 64)}
    monkeypatch.setattr(E, "CUT_CHARS_PER_TOKEN", 1)  # cut as early as allowed, in batches of two lines
    monkeypatch.setattr(E, "BATCH_LINES", 2)
    for m, rows in whole.items():
        cut = E.text_rows(str(texts), init, m)
        assert cut.truncated == rows.truncated and [r.tolist() for r in cut.ids] == [r.tolist() for r in rows.ids]
    assert whole[6].truncated == 2 and len(whole[6].ids) == len(LINES) + 2
    monkeypatch.setattr(E, "MAX_LINE_BYTES", 1000)
    with pytest.raises(RunError, match=rf"--input {texts}: line {len(LINES) + 1} is longer than"):
        E.text_rows(str(texts), init, 6)


def test_an_interrupted_embed_or_export_names_what_it_left(hf_dir, text_file, tmp_path, monkeypatch):
    """Ctrl-C of embed and export-hf told of "partial checkpoints" and "--resume auto", which they have none of."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("bertstream.trainer.embed.embed", interrupted)
    monkeypatch.setattr("bertstream.trainer.hf.export.export_checkpoint", interrupted)
    for argv, left in (
        (
            ["embed", "--init", str(hf_dir), "--input", str(text_file), "--output", str(tmp_path / "o.arrow")],
            "--output",
        ),
        (["export-hf", str(hf_dir), str(tmp_path / "hf")], "nothing was exported"),
    ):
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 130 and left in result.stderr and "checkpoint" not in result.stderr, result.stderr
