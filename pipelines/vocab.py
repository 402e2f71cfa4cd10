"""``bertprep vocab``: train a WordPiece vocabulary with `tokenizers`, from the pipeline's own readers.

Writes ``vocab.txt``, ``tokenizer.json`` and ``tokenizer_config.json`` that ``BertTokenizerFast`` loads
and that tokenize exactly as the pipeline does. ``[PAD] [UNK] [CLS] [SEP] [MASK]`` take ids 0..4.
A deterministic sample of a large corpus: documents are kept when a hash of their id falls under the
sampled fraction, in sorted file order, until ``sample_bytes`` of text are taken.

Deterministic training: `tokenizers` assigns ids to ``##`` continuation pieces in hash-map order, which
changes merge tie-breaks from run to run (huggingface/tokenizers#1794). A first pass over the sample
collects every character that can continue a word, and their ``##`` pieces are registered up front in
sorted order, so the same corpus always gives the same vocabulary, byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import unicodedata
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from apache_beam.io.filesystems import FileSystems
from tokenizers import trainers

from bertstream.cli.errors import UsageError
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.common.output_dir import OutputPolicy, claim_output
from bertstream.pipelines.common.redact import redact_text
from bertstream.pipelines.inputs.read import read_documents
from bertstream.pipelines.inputs.resolve import InputFile, check_text_field, input_format_of, resolve_inputs
from bertstream.pipelines.vocab_config import VocabConfig, VocabJob
from bertstream.schemas.hashing import hash64
from bertstream.schemas.vocab import CLS, SEP, SPECIAL_TOKENS, VOCAB_FILENAME, Vocab
from bertstream.schemas.wordpiece import MAX_WORD_CHARS, bert_tokenizer, with_bert_template

# The files ``bertprep vocab`` writes: an output folder holding these holds an earlier vocabulary.
VOCAB_FILES = (VOCAB_FILENAME, "tokenizer.json", "tokenizer_config.json", "vocab_config.json")


def is_vocab_file(name: str) -> bool:
    return name.removesuffix(".tmp") in VOCAB_FILES


# A run of non-space characters long enough to hold a word past WordPiece's limit (pre-tokenization only splits
# a run, at punctuation and CJK characters).
_LONG_RUN = re.compile(r"\S{" + str(MAX_WORD_CHARS + 1) + ",}")


class LongWords:
    """Cut the words a tokenizer can only turn into one [UNK] (past :data:`MAX_WORD_CHARS` characters) out of
    the text a vocabulary trains on: `tokenizers`' WordPiece trainer is quadratic in a word's length (one run
    of 300,000 letters, a base64 image or a hex dump, took 59 s; 1 MB ran past 120 s), and pieces learnt from
    such a word are pieces of words that never tokenize. Each cut is counted (``vocab_long_words``)."""

    def __init__(self, lowercase: bool) -> None:
        tok = bert_tokenizer(None, lowercase)
        self._normalize = tok.normalizer.normalize_str
        self._split = tok.pre_tokenizer.pre_tokenize_str

    def cut(self, text: str, counters: Counter) -> str:
        if _LONG_RUN.search(text) is None:
            return text
        return _LONG_RUN.sub(lambda m: self._cut_run(m.group(), counters), text)

    def _cut_run(self, run: str, counters: Counter) -> str:
        # The words as the tokenizer sees them: normalised (accents, CJK spacing), then pre-tokenized.
        words = [w for w, _ in self._split(self._normalize(run))]
        long = sum(len(w) > MAX_WORD_CHARS for w in words)
        if not long:
            return run
        counters["vocab_long_words"] += long
        return " ".join(w for w in words if len(w) <= MAX_WORD_CHARS)


# A paragraph reaches the trainer (and LongWords) in pieces of about this many characters, cut where a word ends:
# one unspaced 2M-character CJK record was a single "run" that LongWords pre-tokenized whole, twice (1.3 GB, 46 s;
# the 64 MiB record cap allows ten times that), and the trainer too held every word of a text at once.
PIECE_CHARS = 65_536


def word_pieces_of(text: str) -> Iterator[str]:
    """``text`` in consecutive pieces of at most :data:`PIECE_CHARS` characters, each cut before a character that
    cannot continue a word (white space, punctuation, a CJK character): the words, and so the vocabulary, are
    those of the whole. A word longer than a piece (LongWords cuts it) is kept whole, the piece grown to its end."""
    start, n = 0, len(text)
    while n - start > PIECE_CHARS:
        end = start + PIECE_CHARS
        cut = next(
            (i for i in range(end, max(start, end - MAX_WORD_CHARS - 1), -1) if not _can_continue_word(text[i])), 0
        )
        if cut <= start:  # a word past the limit spans the end: cut after it
            cut = next((i for i in range(end, n) if not _can_continue_word(text[i])), n)
        yield text[start:cut]
        start = cut
    yield text[start:]


def sample_texts(inputs: list[str] | list[InputFile], cfg: VocabConfig, counters: Counter) -> Iterator[str]:
    files = [i for i in inputs if isinstance(i, InputFile)] or resolve_inputs(
        [str(i) for i in inputs], cfg.input_format
    )
    total = sum(f.bytes for f in files)
    fraction = 1.0 if not cfg.sample_bytes or cfg.sample_bytes >= total else cfg.sample_bytes / total
    threshold = int(fraction * 2**64)
    taken = 0
    long_words = LongWords(cfg.lowercase)
    for f in files:
        # Ids below the inputs' common folder (as the pipeline's): the sample, and so the vocabulary, is the same
        # wherever the corpus lives (an absolute path in the id made it depend on the folder it was copied to).
        docs = read_documents(
            f.path, f.format, counters, name=f.name or None, listed=(f.bytes, f.mtime), text_field=cfg.text_field
        )
        for doc in docs:
            if fraction < 1.0 and hash64(cfg.seed, doc.doc_id) >= threshold:
                continue
            for p in doc.paragraphs:
                taken += len(p.encode("utf-8")) + 1
                for piece in word_pieces_of(p):
                    yield long_words.cut(piece, counters)
            counters["documents_sampled"] += 1
            if cfg.sample_bytes and taken >= cfg.sample_bytes:
                return


def _can_continue_word(c: str) -> bool:
    """Characters BERT pre-tokenization can leave inside a word (not space, punctuation, CJK, control)."""
    if c.isspace() or unicodedata.category(c)[0] in "PC":
        return False
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:  # BERT's ASCII punctuation
        return False
    cjk = (
        (0x4E00, 0x9FFF),
        (0x3400, 0x4DBF),
        (0x20000, 0x2A6DF),
        (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF),
        (0xF900, 0xFAFF),
        (0x2F800, 0x2FA1F),
    )
    return not any(a <= cp <= b for a, b in cjk)


def first_pass(texts, lowercase: bool, limit_alphabet: int) -> tuple[list[str], list[str]]:
    """Sorted ``##c`` for every character that occurs in the normalised text and can continue a word, and the
    alphabet the trainer is to keep: the ``limit_alphabet`` commonest characters, ties broken by code point.
    `tokenizers` drops the rarest characters past the limit with ties in hash-map order, so a corpus of more
    distinct characters than the limit (Chinese: 20,000 of about equal counts) gave another vocabulary each run;
    given as the initial alphabet, the kept set is this one (none is dropped when the limit is not reached)."""
    normalize = bert_tokenizer(None, lowercase).normalizer.normalize_str
    counts: Counter = Counter()
    for t in texts:
        counts.update(normalize(t))
    chars = [c for c in counts if not c.isspace()]  # pre-tokenization drops white space: no word holds it
    kept = sorted(chars, key=lambda c: (-counts[c], c))[:limit_alphabet] if len(chars) > limit_alphabet else []
    return sorted("##" + c for c in counts if _can_continue_word(c)), kept


VOCAB_POLICY = OutputPolicy("bertprep vocab", is_vocab_file, what="a vocabulary's", dataset=False)


def train_vocab_job(job: VocabJob) -> tuple[Vocab, Counter]:
    """``bertprep vocab``: resolve the inputs, hold the ``--output`` folder as every bertprep command does
    (:func:`bertstream.pipelines.common.output_dir.claim_output`), train and write."""
    files = resolve_inputs(list(job.inputs), job.config.input_format)
    check_text_field(files, job.config.text_field)
    with claim_output(job.output, job.overwrite, VOCAB_POLICY, {"input": [f.path for f in files]}) as claim:
        return train_vocab(list(job.inputs), claim.output_dir, job.config, files=files)


def write_all(out: Path, writers: dict) -> None:
    """Write every file under a temporary name, then rename them into place: a full disk or any other
    failure leaves the folder as it was (an earlier vocabulary intact), and raises the ``OSError``."""
    tmps = {name: out / f"{name}.tmp" for name in writers}
    try:
        for name, write in writers.items():
            write(tmps[name])
        for name, tmp in tmps.items():
            os.replace(tmp, out / name)
    except BaseException:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)
        raise


def train_vocab(
    inputs: list[str], output_dir: str | Path, cfg: VocabConfig, files: list[InputFile] | None = None
) -> tuple[Vocab, Counter]:
    """Train on ``inputs`` (the ``--input`` patterns; ``files``: them resolved already) and write the files
    into ``output_dir``, a folder or an object-store URL."""
    files = files if files is not None else resolve_inputs(inputs, cfg.input_format)
    counters: Counter = Counter()
    first: Counter = Counter()
    pieces, alphabet = first_pass(sample_texts(files, cfg, first), cfg.lowercase, cfg.limit_alphabet)
    total = sum(f.bytes for f in files)
    if not first["documents_sampled"] and first["documents_read"] and 0 < cfg.sample_bytes < total:
        # The sample is a hash-chosen fraction of the documents: too small a fraction chooses none.
        raise UsageError(
            "sample-bytes",
            f"{cfg.sample_bytes} bytes is too small a sample of {total:,} bytes of input: it takes none of "
            f"the {first['documents_read']} documents read; raise --sample-bytes (0: the whole corpus)",
        )
    if not first["documents_sampled"] or not first["bytes_read"]:
        # Else `tokenizers` trains a vocabulary of the special tokens alone and nothing says why.
        raise InputError(
            f"--input {', '.join(inputs)}: no text to train a vocabulary on "
            f"({first['documents_read']} documents, {first['bytes_read']} bytes read; "
            f"dropped: {C.dropped_text(first) or 'none'})"
        )
    trainer = trainers.WordPieceTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *pieces],
        limit_alphabet=cfg.limit_alphabet,
        initial_alphabet=alphabet,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    trained = bert_tokenizer(None, cfg.lowercase)
    trained.train_from_iterator(sample_texts(files, cfg, counters), trainer=trainer)
    vocab = Vocab(tuple(t for t, _ in sorted(trained.get_vocab().items(), key=lambda kv: kv[1])))
    # Rebuilt from the vocabulary: the ## pieces were "special" only to steer training.
    tok = with_bert_template(bert_tokenizer(vocab, cfg.lowercase), vocab)
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": cfg.lowercase,
        "model_max_length": 512,
        "unk_token": "[UNK]",
        "sep_token": SEP,
        "pad_token": "[PAD]",
        "cls_token": CLS,
        "mask_token": "[MASK]",
    }
    record = {
        "inputs": [redact_text(i) for i in inputs],
        **{k: getattr(cfg, k) for k in cfg.__slots__},
        "input_format": input_format_of(files),  # as read: --format auto's choice, or each input's own
        "vocab_sha256": vocab.sha256,
        "counters": dict(counters),
    }
    writers = {
        VOCAB_FILENAME: vocab.write,
        "tokenizer.json": lambda p: tok.save(str(p)),
        "tokenizer_config.json": lambda p: p.write_text(json.dumps(config, indent=2) + "\n"),
        "vocab_config.json": lambda p: p.write_text(json.dumps(record, indent=2) + "\n"),
    }
    if "://" in str(output_dir):  # an object store: written here, then copied up, each file whole
        with tempfile.TemporaryDirectory(prefix="bertprep-vocab-") as tmp:
            write_all(Path(tmp), writers)
            for name in writers:
                with FileSystems.create(FileSystems.join(str(output_dir), name)) as f:
                    f.write((Path(tmp) / name).read_bytes())
    else:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_all(out, writers)
    return vocab, counters
