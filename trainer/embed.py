"""``berttrain embed``: BERT as a feature extractor, texts (or task rows) in, one vector per row out (Arrow).

Layers are numbered as Hugging Face's ``output_hidden_states``: 0 is the embedding output, ``L`` the last
layer, ``-1`` the last too. Rows are batched by length (sorted, then chunked) so short texts do not pay for a
long one's padding; the output keeps the input's order.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor, nn

from bertstream.cli import options
from bertstream.cli.errors import check
from bertstream.cli.options import opt, section
from bertstream.cli.owned import OutputFile
from bertstream.schemas import json_text
from bertstream.schemas import tasks as T
from bertstream.schemas.redact import redact_values
from bertstream.schemas.vocab import CLS, SEP
from bertstream.schemas.whole_file import WholeFileError, read_whole
from bertstream.schemas.wordpiece import bert_tokenizer, json_lowercase
from bertstream.trainer.config import DeviceBatch, DeviceConfig
from bertstream.trainer.errors import RunError
from bertstream.trainer.init_choice import InitChoice, named
from bertstream.trainer.model import BertModel
from bertstream.trainer.pooling import Pooling
from bertstream.trainer.weights import RANDOM_PREFIX, Init

COMBINES = ("sum", "concat", "mean")
DTYPES = ("float16", "float32")
DEFAULT_MAX_SEQ_LENGTH = 128
_LAYERS = re.compile(r"(-?\d+)?:(-?\d+)?|-?\d+(,-?\d+)*")


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbedConfig:
    starting: InitChoice = section(InitChoice)  # --init, as fine-tuning's
    input: str = opt(
        help="UTF-8 text file (one text per line; blank lines are kept as empty texts) or a task dataset folder."
    )
    # --output and --overwrite: the Arrow file, written whole, checked and refused by its owner (cli.owned)
    written: OutputFile = section(
        OutputFile,
        help={"output": "Arrow IPC file to write (index, num_tokens, embedding)."},
        after={"overwrite": "device"},
    )
    layers: str = opt("-1", "Hidden states to use (0 = embeddings): -1, a slice such as -4:, or 0,3,5.")
    combine: str = opt("mean", "How the layers merge.", choices=COMBINES)
    pooled: Pooling = section(Pooling, pooling="mean")  # --pooling, as fine-tuning's (cls, mean) and none
    # None: 128, or the model's max_position_embeddings when smaller (a value given explicitly above that limit
    # is refused instead).
    max_seq_length: int | None = opt(
        None,
        "Text files: tokens per text, [CLS] and [SEP] included  [default: 128, or the model's "
        "max_position_embeddings when smaller]",
    )
    batch: DeviceBatch = section(DeviceBatch, batch_size=64, help={"batch_size": None})
    dtype: str = opt("float32", choices=DTYPES)
    place: DeviceConfig = section(DeviceConfig)  # --device, as pretraining's and fine-tuning's

    def __post_init__(self) -> None:
        check(bool(self.input), "input", "is required")
        check(
            isinstance(self.layers, str) and _LAYERS.fullmatch(self.layers.replace(" ", "")) is not None,
            "layers",
            f"must be an index (-1), a slice (-4:, 1:3) or a comma list (0,3,5), got {self.layers!r}",
        )
        check(self.combine in COMBINES, "combine", f"must be one of {COMBINES}, got {self.combine!r}")
        check(self.dtype in DTYPES, "dtype", f"must be one of {DTYPES}, got {self.dtype!r}")
        check(
            self.max_seq_length is None or (isinstance(self.max_seq_length, int) and self.max_seq_length >= 2),
            "max_seq_length",
            f"must be an integer >= 2 ([CLS] and [SEP]), got {self.max_seq_length!r}",
        )


def layer_indices(spec: str, num_layers: int) -> tuple[int, ...]:
    """Indices into the ``num_layers + 1`` hidden states that ``--layers`` names (negative ones from the end)."""
    n = num_layers + 1
    spec = spec.replace(" ", "")
    if ":" in spec:
        start, stop = (int(p) if p else None for p in spec.split(":"))
        picked = tuple(range(n))[slice(start, stop)]
        check(
            bool(picked),
            "layers",
            f"{spec!r} selects no layer of the {n} hidden states (0 = embeddings .. {num_layers})",
        )
        return picked
    picked = tuple(int(p) for p in spec.split(","))
    bad = [i for i in picked if not -n <= i < n]
    check(
        not bad,
        "layers",
        f"layer {bad[0] if bad else ''} is outside the model's {n} hidden states "
        f"(0 = embeddings .. {num_layers}, or -1 .. -{n})",
    )
    return tuple(i % n for i in picked)


@dataclass(frozen=True, slots=True)
class Rows:
    """What the encoder reads: per row its ids, where segment B starts, and the input line or task row id."""

    ids: list[np.ndarray]
    segment_a: list[int]
    index: np.ndarray  # int64
    truncated: int  # text rows cut to --max-seq-length


def _lowercase(folder: Path) -> bool:
    # The casing the checkpoint was trained with: tokenizer.json's normalizer, else tokenizer_config.json's or our
    # config.json's do_lower_case; else lowercase, as BertTokenizer (BERT's uncased models) defaults.
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json_text.loads(read_whole(path, name))
        except (json.JSONDecodeError, UnicodeDecodeError, WholeFileError):
            continue
        lower = json_lowercase(data) if name == "tokenizer.json" else data.get("do_lower_case")
        if isinstance(lower, bool):
            return lower
    return True


# A line is one text, read whole: past this it is refused, naming the line (a 200 MB line took 12.6 GB and ran
# past 2 minutes; the tokenizer holds ~75-250 bytes a character of what it is given).
MAX_LINE_BYTES = 1 << 20
# Characters of a line tokenized first, a batch of lines tokenized at once: only --max-seq-length tokens of a
# line are kept, so a long line is cut at a space past CUT_CHARS_PER_TOKEN characters a token (the tokens before
# a space do not depend on what follows it: BERT splits words there); a cut that gives too few tokens (words
# longer than that) is redone on the whole line.
CUT_CHARS_PER_TOKEN = 16
BATCH_CHARS, BATCH_LINES = 1 << 20, 4096


def text_rows(path: str, init: Init, max_seq_length: int) -> Rows:
    """One row per line of a UTF-8 file. Blank lines are kept as empty texts (``[CLS] [SEP]``), so row ``i`` is
    always line ``i``; a final newline ends the last line and adds none. Read a line at a time and tokenized a
    batch at a time: memory is the rows' ids, at most ``max_seq_length`` a row."""
    tok = bert_tokenizer(init.vocab, _lowercase(Path(init.source)))
    cls, sep = init.vocab.id(CLS), init.vocab.id(SEP)
    keep = max_seq_length - 2
    cut_at = CUT_CHARS_PER_TOKEN * (keep + 1)
    ids: list[np.ndarray] = []
    truncated = 0
    batch: list[tuple[str, str]] = []  # (what is tokenized first, the whole line)
    chars = 0  # of the batch's heads

    def flush() -> None:
        nonlocal truncated, chars
        for (head, line), enc in zip(batch, tok.encode_batch([h for h, _ in batch], add_special_tokens=False)):
            body = enc.ids
            if len(head) < len(line) and len(body) <= keep:  # the cut left too few tokens: the whole line
                body = tok.encode(line, add_special_tokens=False).ids
            truncated += len(body) > keep
            ids.append(np.array([cls, *body[:keep], sep], dtype=np.int64))
        batch.clear()
        chars = 0

    with open(path, "rb") as f:
        for number, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):  # MAX_LINE_BYTES and its newline pass
                raise RunError(
                    f"--input {path}: line {number} is longer than {MAX_LINE_BYTES / (1 << 20):g} MiB, the cap of a text "
                    "(only --max-seq-length tokens of it are embedded: cut it, or split it into lines)"
                )
            try:
                line = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
            except UnicodeDecodeError as e:
                raise RunError(f"--input {path}: line {number} is not UTF-8 ({e.reason})") from None
            space = line.find(" ", cut_at) if len(line) > cut_at else -1
            batch.append((line[:space] if space > 0 else line, line))
            chars += len(batch[-1][0])
            if chars >= BATCH_CHARS or len(batch) >= BATCH_LINES:
                flush()
    flush()
    return Rows(ids, [len(r) for r in ids], np.arange(len(ids), dtype=np.int64), truncated)


def task_rows(root: str, init: Init, starting: InitChoice) -> Rows:
    """The rows of a ``bertprep task`` folder, as the fine-tuning reader checks and returns them (already
    ``[CLS] ... [SEP]``, tokenised with the vocabulary the manifest names, which must be the init's)."""
    from bertstream.trainer.finetune.data import load_task_data, task_manifest
    from bertstream.trainer.finetune.tasks import get_task

    hint = "a folder without {}; give a text file or a folder written by `bertprep task`"
    kind = task_manifest(root, "--input", missing=hint).kind  # a fine-tuning task's, or refused
    data = load_task_data(root, get_task(kind), role="--input")
    starting.check_vocab(init, data.vocab.sha256, root)
    ragged = data.columns[T.INPUT_IDS]
    ids = [ragged[i].astype(np.int64) for i in range(len(data))]
    seg = data.columns.get(T.SEGMENT_A_LENGTH)
    segment_a = [int(seg[i]) if seg is not None else len(ids[i]) for i in range(len(data))]
    return Rows(ids, segment_a, np.asarray(data.columns[T.ROW_ID], dtype=np.int64), 0)


def load_encoder(init: Init) -> BertModel:
    """The init's encoder, weights loaded by the fine-tuning loader (every ``bert.*`` tensor must be there)."""
    from bertstream.trainer.finetune.heads import load_encoder_state

    holder = nn.Module()  # load_encoder_state fills ``model.bert``, as in every task model
    holder.bert = BertModel(init.config)
    load_encoder_state(holder, init.state or {}, named(init))
    return holder.bert.eval()


def pool(states: list[Tensor], mask: Tensor, layers: tuple[int, ...], combine: str, pooled: Pooling) -> Tensor:
    """``[B, D]`` (cls, mean) or ``[B, T, D]`` (none) from the hidden states; D = H, or H * len(layers) (concat)."""
    picked = [states[i] for i in layers]
    x = torch.cat(picked, dim=-1) if combine == "concat" else torch.stack(picked).sum(0)
    if combine == "mean":
        x = x / len(picked)
    return pooled.pool(x, mask)


def embed_rows(
    model: BertModel, rows: Rows, cfg: EmbedConfig, layers: tuple[int, ...], device: torch.device, pad_id: int
) -> list[np.ndarray]:
    """One float32 array per row, in row order: ``[D]``, or ``[tokens, D]`` for pooling none."""
    lengths = np.array([len(r) for r in rows.ids], dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    out: list[np.ndarray | None] = [None] * len(rows.ids)
    with torch.inference_mode():
        for part in cfg.batch.chunks(len(order)):
            chunk = order[part]
            t = int(lengths[chunk].max())
            ids = np.full((len(chunk), t), pad_id, dtype=np.int64)
            types = np.zeros_like(ids)
            mask = np.zeros_like(ids)
            for j, i in enumerate(chunk):
                n = lengths[i]
                ids[j, :n], mask[j, :n] = rows.ids[i], 1
                types[j, rows.segment_a[i] : n] = 1
            m = torch.from_numpy(mask).to(device)
            states = model.hidden_states(torch.from_numpy(ids).to(device), torch.from_numpy(types).to(device), m)
            vec = pool(states, m, layers, cfg.combine, cfg.pooled).float().cpu().numpy()
            for j, i in enumerate(chunk):
                out[i] = vec[j, : lengths[i]] if cfg.pooled.per_token else vec[j]
    return out  # type: ignore[return-value]


def to_table(vectors: list[np.ndarray], rows: Rows, cfg: EmbedConfig, width: int, meta: dict[str, Any]) -> pa.Table:
    value = pa.float16() if cfg.dtype == "float16" else pa.float32()
    np_type = np.float16 if cfg.dtype == "float16" else np.float32
    if cfg.pooled.per_token:
        flat = np.concatenate(vectors).astype(np_type) if vectors else np.zeros((0, width), np_type)
        tokens = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1), type=value), width)
        offsets = np.concatenate([[0], np.cumsum([len(v) for v in vectors])]).astype(np.int32)
        column = pa.ListArray.from_arrays(pa.array(offsets), tokens)
    else:
        flat = np.stack(vectors).astype(np_type) if vectors else np.zeros((0, width), np_type)
        column = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1), type=value), width)
    table = pa.table(
        {
            "index": pa.array(rows.index, pa.int64()),
            "num_tokens": pa.array([len(r) for r in rows.ids], pa.int32()),
            "embedding": column,
        }
    )
    return table.replace_schema_metadata({"bertstream.embed": json.dumps(meta)})


def write_atomic(table: pa.Table, path: Path) -> None:
    # A temporary file beside the target, then a rename: a reader never sees a half-written file.
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def embed(cfg: EmbedConfig) -> dict[str, Any]:
    """Run the extraction; returns a summary (rows, width, output path, truncated texts)."""
    from bertstream.trainer import distributed as D

    inputs = (("--input", cfg.input), cfg.starting.input_path)
    read = [(flag, path) for flag, path in inputs if not path.startswith(RANDOM_PREFIX)]  # a random init reads none
    out = cfg.written.target(read, what="the Arrow file to write")
    init = cfg.starting.resolve(None)
    layers = layer_indices(cfg.layers, init.config.num_layers)
    limit = init.config.max_position_embeddings
    max_len = min(DEFAULT_MAX_SEQ_LENGTH, limit) if cfg.max_seq_length is None else cfg.max_seq_length
    check(max_len <= limit, "max_seq_length", f"{max_len} exceeds the model's max_position_embeddings ({limit})")
    source = Path(cfg.input)
    if source.is_dir():
        rows = task_rows(cfg.input, init, cfg.starting)
        refusal = init.config.too_long(f"--input {cfg.input}", max((len(r) for r in rows.ids), default=0))
        if refusal is not None:
            raise RunError(refusal)
    elif source.is_file():
        rows = text_rows(cfg.input, init, max_len)
    elif source.exists():  # a FIFO, a socket, a device: read once it would be gone, so not read at all
        raise RunError(f"--input {cfg.input}: not a regular file (nor a task dataset folder)")
    else:
        raise RunError(f"--input {cfg.input}: no such file or folder")
    device = D.setup_on(cfg.place).device
    model = load_encoder(init).to(device)
    width = init.config.hidden_size * (len(layers) if cfg.combine == "concat" else 1)
    vectors = embed_rows(model, rows, cfg, layers, device, init.vocab.id("[PAD]"))
    meta = {
        **redact_values(options.flat(cfg)),  # the flags by name, as before sections
        "max_seq_length": max_len,
        "layer_indices": list(layers),
        "width": width,
        "vocab_sha256": init.vocab.sha256,
        "truncated": rows.truncated,
    }
    write_atomic(to_table(vectors, rows, cfg, width, meta), out)
    return {"rows": len(rows.ids), "width": width, "output": str(out), "truncated": rows.truncated}
