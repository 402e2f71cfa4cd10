"""Sentence segmentation: hard cases, span invariants, pathological input, F1 on shared gold."""

from __future__ import annotations

import random

import pytest

from bertstream.pipelines.pretraining.segmenter import sentence_spans, split_sentences
from tests.conftest import SHARED

DATA = SHARED  # ../shared/data beside the repository
_CJK_END = set("。！？；」』）”’")


def assert_invariants(text: str, spans: list[tuple[int, int]]) -> None:
    """Ordered, non-overlapping, trimmed spans that cover every non-whitespace character once,
    cut only at whitespace (or right after a CJK terminator)."""
    prev = 0
    for i, (s, e) in enumerate(spans):
        assert prev <= s < e <= len(text), (i, s, e, prev)
        assert not text[s].isspace() and not text[e - 1].isspace(), (i, text[s:e])
        gap = text[prev:s]
        assert gap.strip() == "", (i, gap)
        if i and not gap:
            assert text[s - 1] in _CJK_END, text[max(0, s - 20) : s + 20]
        prev = e
    assert text[prev:].strip() == ""
    # no non-whitespace character lost or repeated
    assert "".join("".join(text[s:e].split()) for s, e in spans) == "".join(text.split())


HARD_CASES = [
    # abbreviations: titles, places, companies, Latin
    (
        "Mr. Smith met Dr. Jones at St. Mary's Church. They talked.",
        ["Mr. Smith met Dr. Jones at St. Mary's Church.", "They talked."],
    ),
    (
        "Gen. Smith, Gov. Brown, Sen. Lee and Rep. Ortiz met on Jan. 5, 2004, and again in Sept. 2005.",
        ["Gen. Smith, Gov. Brown, Sen. Lee and Rep. Ortiz met on Jan. 5, 2004, and again in Sept. 2005."],
    ),
    (
        "Apples, pears, etc. are fruit. Carrots, e.g. the orange ones, i.e. most of them, are not.",
        ["Apples, pears, etc. are fruit.", "Carrots, e.g. the orange ones, i.e. most of them, are not."],
    ),
    (
        "Acme Inc. said profit rose. Beta Corp. and Gamma Co. Ltd. disagreed.",
        ["Acme Inc. said profit rose.", "Beta Corp. and Gamma Co. Ltd. disagreed."],
    ),
    (
        "He works for Acme Inc. The company is based in Ohio.",
        ["He works for Acme Inc.", "The company is based in Ohio."],
    ),
    (
        "The U.S. economy grew faster than the U.K. economy. It was the best year in the U.S. The rest lagged.",
        [
            "The U.S. economy grew faster than the U.K. economy.",
            "It was the best year in the U.S.",
            "The rest lagged.",
        ],
    ),
    (
        "Roe v. Wade was decided in 1973. Smith vs. Jones followed.",
        ["Roe v. Wade was decided in 1973.", "Smith vs. Jones followed."],
    ),
    (
        "Martin Luther King Jr. was born in 1929. He died in 1968.",
        ["Martin Luther King Jr. was born in 1929.", "He died in 1968."],
    ),
    (
        "He was born in St. Louis, Mo., in 1950. He moved to Hartford, Conn. Police said nothing.",
        ["He was born in St. Louis, Mo., in 1950.", "He moved to Hartford, Conn.", "Police said nothing."],
    ),
    (
        "The meeting is at 5 p.m. on Friday. It will be short.",
        ["The meeting is at 5 p.m. on Friday.", "It will be short."],
    ),
    (
        "The Ph.D. program at the Univ. of Chicago started in 1892.",
        ["The Ph.D. program at the Univ. of Chicago started in 1892."],
    ),
    (
        "Results from Hewlett-Packard Co. (HPQ) and Acme Inc. ACME.N lifted stocks.",
        ["Results from Hewlett-Packard Co. (HPQ) and Acme Inc. ACME.N lifted stocks."],
    ),
    (
        "The strike ended under then-Gov. Walter Hickel, before the post-Sept. 11 era.",
        ["The strike ended under then-Gov. Walter Hickel, before the post-Sept. 11 era."],
    ),
    (
        "The ark (1 Sam. 5:1-6) moved. Smith et al. (2013) and Jones et al. agree. It weighs 3 lb. (1.4 kg) in total.",
        [
            "The ark (1 Sam. 5:1-6) moved.",
            "Smith et al. (2013) and Jones et al. agree.",
            "It weighs 3 lb. (1.4 kg) in total.",
        ],
    ),
    # a page citation WikiExtractor leaves after the stop
    ("It is in the alphabet.:435 The rest followed.", ["It is in the alphabet.:435", "The rest followed."]),
    # initials
    (
        "J. R. R. Tolkien wrote it. George W. Bush read it. A. A. Milne did not.",
        ["J. R. R. Tolkien wrote it.", "George W. Bush read it.", "A. A. Milne did not."],
    ),
    (
        "The plan failed, so they moved to Plan B. The rest is history.",
        ["The plan failed, so they moved to Plan B.", "The rest is history."],
    ),
    # numbers and decimals
    (
        "Sales rose 3.5% to $1.2 billion. Profit fell to $0.4 billion.",
        ["Sales rose 3.5% to $1.2 billion.", "Profit fell to $0.4 billion."],
    ),
    (
        "It ranked No. 5 in the poll; see pp. 23-25, Fig. 3 and Vol. II for details.",
        ["It ranked No. 5 in the poll; see pp. 23-25, Fig. 3 and Vol. II for details."],
    ),
    ("The answer was no. The vote failed.", ["The answer was no.", "The vote failed."]),
    ("The war ended in 1945. 1946 was quiet.", ["The war ended in 1945.", "1946 was quiet."]),
    ("Pi is about 3.14. E is about 2.72.", ["Pi is about 3.14.", "E is about 2.72."]),
    (
        "1. Introduction to the topic. 2. Methods are described next.",
        ["1. Introduction to the topic.", "2. Methods are described next."],
    ),
    # ellipses
    (
        "Wait... What happened? He paused... then went on.",
        ["Wait...", "What happened?", "He paused... then went on."],
    ),
    (
        'He said "we must go . . . now" and left. She stayed.',
        ['He said "we must go . . . now" and left.', "She stayed."],
    ),
    (
        '"The view ... from the top is fine," he said… Then he slept.',
        ['"The view ... from the top is fine," he said…', "Then he slept."],
    ),
    # quotes and brackets after the terminator
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ('He said "Stop." then he left.', ['He said "Stop." then he left.']),
    ("(See above.) Next comes the proof.", ["(See above.)", "Next comes the proof."]),
    ("It was big (very big). Then it shrank.", ["It was big (very big).", "Then it shrank."]),
    ('It ended. "Never again," he said.', ["It ended.", '"Never again," he said.']),
    ("“Go home.” ‘Now?’ She went.", ["“Go home.”", "‘Now?’", "She went."]),
    ('"Who is there?" she asked. "Me!" he said.', ['"Who is there?" she asked.', '"Me!" he said.']),
    # ? and !
    ("Really? Yes! It works.", ["Really?", "Yes!", "It works."]),
    ("What?! No way!! Fine.", ["What?!", "No way!!", "Fine."]),
    ("Why? because.", ["Why? because."]),
    # lowercase after a real end, when it is a camel-case word
    ("The company makes phones. iPhone sales rose.", ["The company makes phones.", "iPhone sales rose."]),
    # URLs and e-mail addresses
    (
        "Visit www.example.com. Email john.doe@example.org for details.",
        ["Visit www.example.com.", "Email john.doe@example.org for details."],
    ),
    (
        "The file is at http://example.com/a.html?x=1. Download it.",
        ["The file is at http://example.com/a.html?x=1.", "Download it."],
    ),
    # CJK full stops, with and without spaces
    ("他来了。我们走吧！好吗？", ["他来了。", "我们走吧！", "好吗？"]),
    ("「走吧。」他说。 The end.", ["「走吧。」", "他说。", "The end."]),
    # whitespace: multiple spaces, tabs, newlines, no-break spaces, padding
    ("One.   Two.\tThree.\nFour.\u00a0Five.", ["One.", "Two.", "Three.", "Four.", "Five."]),
    ("  Hello there.  Bye.  ", ["Hello there.", "Bye."]),
    ("no terminator at all", ["no terminator at all"]),
]


@pytest.mark.parametrize("text,expected", HARD_CASES, ids=[c[0][:40] for c in HARD_CASES])
def test_hard_cases(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected
    assert_invariants(text, sentence_spans(text))


def test_spans_are_trimmed_offsets() -> None:
    text = "  Hello there.  Bye.  "
    assert sentence_spans(text) == [(2, 14), (16, 20)]


@pytest.mark.parametrize("text", ["", " ", "\t\n  \u00a0"])
def test_blank_paragraph_has_no_sentences(text: str) -> None:
    assert sentence_spans(text) == []
    assert split_sentences(text) == []


def test_invariants_on_random_tricky_text() -> None:
    # Random strings over the characters the rules look at: every output must keep the invariants.
    alphabet = [
        ".",
        "!",
        "?",
        "…",
        "。",
        "！",
        "」",
        "”",
        '"',
        "'",
        ")",
        "(",
        "(1",
        " ",
        "  ",
        "\t",
        "\n",
        "\u00a0",
        "a",
        "A",
        "Mr",
        "St",
        "U.S",
        "Inc",
        "Calif",
        "e.g",
        "1",
        ":12",
        "é",
        "J",
        "p",
        "iPhone",
        "the",
        "The",
        "No",
        "...",
        ". . .",
        "-",
        "—",
        "/",
    ]
    rng = random.Random(1234)
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert_invariants(text, sentence_spans(text))


def test_five_megabyte_paragraph_without_terminator() -> None:
    text = "word " * 1_000_000  # 5 MB, no terminator: one sentence, nothing lost
    assert sentence_spans(text) == [(0, len(text) - 1)]
    blob = "x" * 5_000_000  # one 5 MB token
    assert sentence_spans(blob) == [(0, len(blob))]


@pytest.mark.parametrize(
    "text",
    [
        "." * 1_000_000,
        ". " * 500_000,
        "a." * 500_000,
        "!" * 1_000_000 + "a",
        "." + '"' * 1_000_000 + "a",
        ("." * 1000 + "a") * 1000,
        "A. " * 300_000,
    ],
    ids=["dots", "spaced-dots", "a.-run", "bangs", "dot-quotes", "dot-runs", "initials"],
)
def test_pathological_runs_keep_one_sentence(text: str) -> None:
    # Long terminator/closer runs are where a backtracking regex goes quadratic; they must still
    # produce a single sentence covering the input (a long "A. A. A." run is a chain of initials).
    spans = sentence_spans(text)
    assert spans == [(0, len(text.rstrip()))]


@pytest.mark.shared_data
def test_invariants_on_wikipedia_paragraphs() -> None:
    if not DATA.is_dir():
        pytest.skip(f"shared data not found at {DATA}")
    from benchmarks.segmenter_eval import wikipedia_paragraphs

    paragraphs = wikipedia_paragraphs(DATA)
    assert len(paragraphs) > 10_000
    sentences = 0
    for p in paragraphs[::10]:
        spans = sentence_spans(p)
        assert_invariants(p, spans)
        sentences += len(spans)
    assert sentences > len(paragraphs[::10]) * 2  # encyclopedic paragraphs hold several sentences


@pytest.mark.shared_data
def test_f1_on_shared_gold() -> None:
    if not DATA.is_dir():
        pytest.skip(f"shared data not found at {DATA}")
    from benchmarks.lib.segment_gold import Counts, all_gold, boundary_counts

    sources = all_gold(DATA)
    assert [g.name for g in sources] == ["sample_text", "mrpc", "conll"]
    # the removals documented in benchmarks/lib/segment_gold.py
    assert [(g.total, g.removed) for g in sources] == [
        (33, {"E1": 4, "E2": 3}),
        (10944, {"E1": 9}),
        (20744, {"E1": 9702, "E2": 108, "E3": 62}),
    ]
    total = Counts()
    for g in sources:
        assert g.boundaries > 0, g.name
        for text, gold in g.paragraphs:
            # gold boundaries start a sentence right after one space
            assert all(text[b - 1] == " " and not text[b].isspace() for b in gold), g.name
        c = boundary_counts(sentence_spans, g.paragraphs)
        assert c.f1 >= 0.98, f"{g.name}: P={c.precision:.4f} R={c.recall:.4f} F1={c.f1:.4f} {c}"
        total = total + c
    assert total.tp + total.fn > 15_000
    assert total.f1 >= 0.98, f"overall F1={total.f1:.4f} {total}"


def test_detokenize_conll_tokens() -> None:
    from benchmarks.lib.segment_gold import detokenize

    tokens = "\" We do n't support it , \" the Commission 's aide said ( in Brussels ) for $ 17,000 .".split()
    expected = "\"We don't support it,\" the Commission's aide said (in Brussels) for $17,000."
    assert detokenize(tokens) == expected
