"""``bertprep report``: the shard pass, the numbers, the page, and the page as a browser renders it."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bertstream.cli.errors import UsageError
from bertstream.pipelines.cli import main
from bertstream.pipelines.common import counters as C
from bertstream.pipelines.common import source_stats as SS
from bertstream.pipelines.common.dataset import load_manifest
from bertstream.pipelines.report.data import MAX_TOP, ReportConfig, ReportData, collect, count_tokens, duplicates
from bertstream.pipelines.report.html import render
from bertstream.pipelines.report.inspection import load_vocab
from bertstream.pipelines.report.page import check_report_folder, write_report
from bertstream.pipelines.report.plots import PLOTS, Figure

SHOT = (1280, 1600)  # the screenshot's window size


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("needs chromium for the browser check: `make browser` installs it (about 330 MB, as root, apt-get)")


def headless(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Chromium as root in a container: no sandbox, no GPU, no network chatter, a fresh profile."""
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",  # lets the load event and the page's image check run
        *args,
        page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


@pytest.fixture(scope="module")
def report(demo_shards, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    return Path(write_report(str(demo_shards), str(out)))


def test_token_counts_are_the_instances_before_masking(demo_shards):
    m = load_manifest(str(demo_shards))
    vocab = load_vocab(str(demo_shards), m)
    arrow = count_tokens(str(demo_shards), m, len(vocab))
    hist = np.asarray(m.statistics["length_histogram"])
    assert arrow.instances == m.totals["instances"] and arrow.counts.sum() == (hist * np.arange(len(hist))).sum()
    assert arrow.counts[vocab.id("[CLS]")] == arrow.instances and arrow.counts[vocab.id("[SEP]")] == 2 * arrow.instances
    # Masked positions are counted as their original ids: no [MASK] is left, though 80% of predictions are one.
    assert arrow.counts[vocab.id("[MASK]")] == 0 and arrow.masked == m.statistics["predictions_histogram"] @ np.arange(
        len(m.statistics["predictions_histogram"])
    )
    assert abs(arrow.not_next / arrow.instances - m.statistics["next_sentence"]["not_next"]) < 1e-4
    # The WebDataset copy of the same rows gives the same counts.
    wds = dataclasses.replace(m, shards=tuple(m.shards_of("webdataset")))
    other = count_tokens(str(demo_shards), wds, len(vocab))
    assert other.state_dict()["instances"] == arrow.instances and (other.counts == arrow.counts).all()
    restored = type(arrow).empty(len(vocab))
    restored.load_state_dict(arrow.state_dict())
    assert (restored.counts == arrow.counts).all() and restored.not_next == arrow.not_next


def test_key_numbers_and_series(demo_shards):
    m = load_manifest(str(demo_shards))
    vocab = load_vocab(str(demo_shards), m)
    tokens = count_tokens(str(demo_shards), m, len(vocab))
    data = collect(m, vocab, tokens, ReportConfig(top_sources=5), "demo")
    numbers = dict(data.numbers)
    assert numbers["instances"] == f"{m.totals['instances']:,}"
    assert numbers["duplicates removed"] == "dedup not run"
    assert numbers["input sources"] == f"{len(SS.per_source(m.counters))}"
    s = data.series
    assert sum(n for _, n in s["next_sentence"]) == m.totals["instances"]
    # Top 5 sources by tokens, then the rest as one bar: nothing is left out of the totals.
    assert len(s["source_tokens"]) == 6 and s["source_tokens"][-1][0].startswith("other (")
    assert sum(n for _, n in s["source_tokens"]) == m.counters[C.TOKENS]
    assert sum(n for _, n in s["source_documents"]) == m.counters[C.DOCUMENTS_USED]
    assert dict(s["drops"]) == {"empty": 0, "malformed_json": 0, "missing_text_field": 0, "no_tokens": 0}
    top = s["top_tokens"]
    assert (
        len(top) == 30 and "[CLS]" not in dict(top) and [n for _, n in top] == sorted((n for _, n in top), reverse=True)
    )
    assert top[0][1] == max(int(tokens.counts[vocab.id(t)]) for t in vocab.tokens if not t.startswith("["))
    assert data.unk_words == []  # the vocabulary was trained on this corpus


def test_duplicates_shown_when_dedup_ran(demo_shards, demo_corpus, demo_vocab, tmp_path):
    from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
    from bertstream.pipelines.pretraining.pipeline import run_pretraining

    assert duplicates(load_manifest(str(demo_shards))) is None  # a run without --dedup
    src = tmp_path / "in"
    src.mkdir()
    names = sorted(p.name for p in demo_corpus.glob("*.txt"))[:6]
    for name in names:
        shutil.copy(demo_corpus / name, src / name)
    for name in names[:2]:  # two exact copies under later names: the originals (smaller ids) are kept
        shutil.copy(demo_corpus / name, src / f"zz-{name}")
    out = tmp_path / "out"
    cfg = PretrainingConfig(input_format="text", dupe_factor=1, num_shards=1, dedup="exact")
    run_pretraining(
        PretrainingJob(
            inputs=tuple([str(src / "*.txt")]), vocab=str(demo_vocab / "vocab.txt"), output=str(out), config=cfg
        )
    )
    m = load_manifest(str(out))
    assert duplicates(m) == {"exact_duplicate": 2, "near_duplicate": 0}
    page = Path(write_report(str(out), str(tmp_path / "report"))).read_text(encoding="utf-8")
    assert "exact_duplicate 2" in page
    for name in names[:2]:
        assert re.search(rf"zz-{re.escape(name)}</td><td>exact of (?:[^<]*/)?{re.escape(name)}<", page), name


def test_page_links_every_plot_and_escapes_text(report):
    html = report.read_text(encoding="utf-8")
    images = re.findall(r'<img src="([^"]+)"', html)
    assert len(images) == len(PLOTS) and all((report.parent / i).stat().st_size > 5000 for i in images)
    assert all(not i.startswith(("/", "http")) for i in images)  # relative: the folder can move
    page = render(
        ReportData(title="<script>x</script>", numbers=[("a&b", "<i>")], unk_words=[("<b>", 1)]),
        [Figure("x.png", '"q"', "c")],
    )
    assert "<script>x" not in page and "&lt;script&gt;x" in page and "a&amp;b" in page and "&lt;b&gt;" in page


def test_report_renders_in_headless_chromium(report, tmp_path):
    dom = headless(report, tmp_path / "profile-dom", "--dump-dom").stdout
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert f'data-images="{len(PLOTS)}"' in body and f'data-images-loaded="{len(PLOTS)}"' in body, body
    assert f"all {len(PLOTS)} plots loaded" in dom
    # A broken link is reported on the page itself.
    (report.parent / "drops.png").rename(report.parent / "drops.png.bak")
    try:
        dom = headless(report, tmp_path / "profile-broken", "--dump-dom").stdout
        assert "plots missing: drops.png" in dom
    finally:
        (report.parent / "drops.png.bak").rename(report.parent / "drops.png")


def test_report_screenshot_is_the_page_not_a_blank(report, tmp_path):
    import matplotlib.image

    shot = tmp_path / "shot.png"
    headless(report, tmp_path / "profile-shot", f"--screenshot={shot}", f"--window-size={SHOT[0]},{SHOT[1]}")
    pixels = matplotlib.image.imread(shot)  # [height, width, channels] floats
    assert pixels.shape[:2] == (SHOT[1], SHOT[0])
    colours = np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50  # text, bars, axes, antialiasing: a blank or error page has a handful
    bar = np.array([0x3B, 0x6E, 0xA8]) / 255  # the plots' bar colour drawn on screen
    assert (np.abs(pixels[..., :3] - bar).max(axis=-1) < 0.02).sum() > 5000


def test_cli_writes_the_report_and_errors_are_one_line(demo_shards, tmp_path):
    out = tmp_path / "r"
    r = CliRunner().invoke(main, ["report", str(demo_shards), "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == f"report: {out / 'index.html'}" and (out / "lengths.png").exists()
    check_report_folder(str(out))  # its own earlier report (marked) is replaced as it is
    # Commands own what they write (issue 33): a user's folder is never written into, even of the same names.
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("my page")
    r = CliRunner().invoke(main, ["report", str(demo_shards), "--output", str(site)])
    assert r.exit_code == 2 and "already holds index.html, which a bertprep report would replace" in r.output
    assert (site / "index.html").read_text() == "my page" and sorted(p.name for p in site.iterdir()) == ["index.html"]
    r = CliRunner().invoke(main, ["report", str(tmp_path / "nothing")])
    assert r.exit_code == 1 and r.output.startswith("Error: ") and "no manifest.json" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["report", str(demo_shards), "--top-tokens", "0"])
    assert r.exit_code == 2 and "'--top-tokens'" in r.output


def test_manifest_from_before_sources_were_recorded_says_so(demo_shards, tmp_path):
    m = load_manifest(str(demo_shards))
    old = dataclasses.replace(
        m,
        counters={k: v for k, v in m.counters.items() if not k.startswith("source_") and k != SS.UNK_TOKENS},
        statistics={k: v for k, v in m.statistics.items() if k != "unk_words"},
    )
    vocab = load_vocab(str(demo_shards), m)
    data = collect(old, vocab, count_tokens(str(demo_shards), m, len(vocab)), ReportConfig(), "old")
    numbers = dict(data.numbers)
    assert numbers["input sources"] == "not recorded" and numbers["[UNK] in the input"] == "not recorded"
    assert data.unk_words is None and data.series["source_tokens"] == [] and data.notes
    page = render(data, [])
    assert "Not recorded in this manifest" in page and "made before they were recorded" in page


def test_the_top_counts_have_a_ceiling():
    """--top-tokens 1000000 drew a bar per token a dataset holds: 3,000 of them took 28 s and 400 MB."""
    assert ReportConfig(top_tokens=MAX_TOP).top_tokens == MAX_TOP
    for name in ("top_tokens", "top_sources", "top_unk_words"):
        with pytest.raises(UsageError, match=f"must be at most {MAX_TOP:,}") as e:
            ReportConfig(**{name: 10**12})
        assert e.value.param == name


def _copy_dataset(demo_shards, folder):
    shutil.copytree(demo_shards, folder, ignore=shutil.ignore_patterns("report"))
    return folder


def test_the_default_report_folder_is_no_link_out_of_the_dataset(demo_shards, tmp_path):
    """``DIR/report``, a link to another folder (another dataset's report, marked as bertprep's), was followed
    and the page there overwritten (issue 53, item 3): refused in one line, as a manifest's link out is."""
    data = _copy_dataset(demo_shards, tmp_path / "ds")
    elsewhere = tmp_path / "other-report"
    elsewhere.mkdir()
    (elsewhere / "index.html").write_text("another dataset's page")
    (elsewhere / ".bertprep-report").write_text("")
    (data / "report").symlink_to(elsewhere)
    r = CliRunner().invoke(main, ["report", str(data)])
    assert r.exit_code == 1 and "a link out of the dataset folder" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and r.output.startswith("Error: ")
    assert (elsewhere / "index.html").read_text() == "another dataset's page"


def test_someones_page_in_the_default_report_folder_is_kept(demo_shards, tmp_path):
    """An unmarked ``DIR/report/index.html`` was taken for a report from before the mark and replaced."""
    data = _copy_dataset(demo_shards, tmp_path / "ds")
    (data / "report").mkdir()
    (data / "report" / "index.html").write_text("my page")
    r = CliRunner().invoke(main, ["report", str(data)])
    assert r.exit_code == 2 and "already holds index.html, which a bertprep report would replace" in r.output
    assert (data / "report" / "index.html").read_text() == "my page"
