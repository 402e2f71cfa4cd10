"""Shared fixtures: the real data beside the repository, and small vocabularies trained on real text."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import pytest

from tests.s3_server import s3_server  # noqa: F401  (a fixture: a real S3 API on 127.0.0.1)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One intra-op thread per test process: with two cores shared by xdist workers (or anything else), OpenMP
# threads spin against each other and a tiny model's step gets ten times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data; skips the test with a clear message when it is absent."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs the shared data at {p} (../shared/data beside the repository)")
    return p


@pytest.fixture()
def ctrl_c_at_default():
    """Ctrl-C raising KeyboardInterrupt in this process while the test runs, whatever it inherited: a test run
    started in the background (``cmd &``, a CI runner's job) starts with SIGINT ignored, and the funnel then
    leaves Ctrl-C alone, as it does for a user's background job."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.fixture()
def closed_port() -> int:
    """A local port nothing listens on (bound, then closed): a server that refuses connections."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(autouse=True, scope="session")
def _quiet_beam_logging():
    # `import apache_beam` configures root logging; keep test output readable.
    logging.getLogger().setLevel(logging.ERROR)


@pytest.fixture(scope="session")
def demo_corpus(tmp_path_factory) -> Path:
    from bertstream.pipelines.demo_corpus import write_pydoc_corpus

    d = tmp_path_factory.mktemp("pydoc")
    write_pydoc_corpus(d)
    return d


@pytest.fixture(scope="session")
def demo_vocab(tmp_path_factory, demo_corpus) -> Path:
    """A 4,000-token uncased vocabulary trained on the pydoc corpus (always available)."""
    from bertstream.pipelines.vocab import VocabConfig, train_vocab

    out = tmp_path_factory.mktemp("demo_vocab")
    train_vocab([str(demo_corpus / "*.txt")], out, VocabConfig(input_format="text", vocab_size=4000))
    return out


@pytest.fixture(scope="session")
def wiki_vocab(tmp_path_factory) -> Path:
    """A 16,000-token uncased vocabulary trained on four shared Wikipedia files."""
    from bertstream.pipelines.vocab import VocabConfig, train_vocab

    wiki = shared_path("pretrain", "wikipedia")
    out = tmp_path_factory.mktemp("wiki_vocab")
    train_vocab([str(wiki / "wiki_0[0-3]")], out, VocabConfig(input_format="wikiextractor", vocab_size=16000))
    return out


@pytest.fixture(scope="session")
def demo_shards(tmp_path_factory, demo_corpus, demo_vocab) -> Path:
    """Pretraining shards (length 128, dupe 3, 3 Arrow + 3 WebDataset shards) of the pydoc corpus."""
    from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
    from bertstream.pipelines.pretraining.pipeline import run_pretraining

    out = tmp_path_factory.mktemp("demo_shards")
    cfg = PretrainingConfig(input_format="text", dupe_factor=3, num_shards=3, output_format="both")
    run_pretraining(
        PretrainingJob(
            inputs=tuple([str(demo_corpus / "*.txt")]), vocab=str(demo_vocab / "vocab.txt"), output=str(out), config=cfg
        )
    )
    return out
