"""The README's "After the demo" snippets, run as written (extracted from README.md) in a folder laid out as the
demo leaves it: real pretraining shards of the pydoc corpus in both formats, and an exported tiny model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def snippets() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## After the demo\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory, demo_shards: Path) -> Path:
    pytest.importorskip("transformers")
    from bertstream.schemas.vocab import Vocab
    from bertstream.trainer.hf.export import export_hf
    from bertstream.trainer.model import BertForPreTraining
    from bertstream.trainer.model_config import bert_tiny

    root = tmp_path_factory.mktemp("after_demo")
    (root / "demo").mkdir()
    (root / "demo" / "shards").symlink_to(demo_shards)
    vocab = Vocab.load(demo_shards / "vocab.txt")
    config = bert_tiny(len(vocab))
    export_hf(BertForPreTraining(config), config, vocab, root / "demo" / "hf", do_lower_case=True)
    return root


def run(code: str, cwd: Path) -> str:
    return run_both(code, cwd)[0]


def run_both(code: str, cwd: Path) -> tuple[str, str]:
    """stdout and stderr of ``python -c code`` in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(cwd / "hf_home"), "HF_HUB_OFFLINE": "1"}
    env |= {"HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    # The default collate's "NumPy array is not writable" warning fails the run.
    args = [sys.executable, "-W", "error:The given NumPy array is not writable:UserWarning", "-c", code]
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p.stdout, p.stderr


def test_the_readme_has_the_three_snippets():
    assert len(snippets()) == 3


def test_the_webdataset_snippet_says_which_flag_writes_tar_shards():
    """The snippet reads ``*.tar``, which the default --output-format does not write: the README says so."""
    from dataclasses import fields

    from bertstream.pipelines.pretraining.config import PretrainingConfig

    default = next(f.default for f in fields(PretrainingConfig) if f.name == "output_format")
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    before = " ".join(
        text.split("```python\nimport glob\n\nimport torch\nimport webdataset", 1)[0].split("```")[-1].split()
    )
    assert default != "webdataset" and "--output-format webdataset" in before and f"the default, `{default}`" in before


def test_shards_in_hugging_face_datasets(demo_dir):
    manifest = json.loads((demo_dir / "demo" / "shards" / "manifest.json").read_text())
    rows = sum(s["count"] for s in manifest["shards"] if s["format"] == "arrow")
    assert run(snippets()[0], demo_dir).split(maxsplit=2)[:2] == [str(rows), str(rows)]


def test_webdataset_shards_with_the_stock_library(demo_dir):
    out = run(snippets()[1], demo_dir)
    # int64 (torch prints no dtype for it): what nn.Embedding takes, where the shard's uint16 fails
    assert re.fullmatch(r"tensor\(\[\s*2,[^a-z]*\]\) tensor\(\[[^a-z]*\]\) [01]\s*", out, re.S), out


def test_the_export_with_auto_model(demo_dir):
    out, err = run_both(snippets()[2], demo_dir)
    assert re.fullmatch(r"torch\.Size\(\[1, \d+, 128\]\)\s*", out), out
    # transformers' load report lists, as UNEXPECTED, the pretraining heads a bare encoder has no use for (as
    # for Google's own bert-base-uncased); the README says so. Nothing else is in it, and nothing is MISSING.
    listed = set(re.findall(r"^(\S+)\s*\|\s*(\w+)\s*\|", err, re.M)) - {("Key", "Status")}
    assert listed and {status for _, status in listed} == {"UNEXPECTED"}, err
    assert {key.split(".")[0] for key, _ in listed} == {"cls"}, err


def test_the_export_loads_whole_as_bert_for_pretraining(demo_dir):
    # the class its config.json names: every tensor used, no load report
    code = "from transformers import BertForPreTraining\nBertForPreTraining.from_pretrained('demo/hf')\nprint('ok')"
    out, err = run_both(code, demo_dir)
    assert out.strip() == "ok" and "LOAD REPORT" not in err and "UNEXPECTED" not in err, err
