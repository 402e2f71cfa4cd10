"""The pretraining pipeline on engines other than the in-process FnApiRunner, against its output.

PortableRunner: Beam's Python job service and an EXTERNAL worker pool, each a separate process, whose Python
cannot import this checkout: the code reaches the SDK workers only as the ``--setup_file`` sdist staged
with the job and installed by ``pipelines/runners/beam_boot.py``, the way Flink and Spark run Python without Docker.

DaskRunner (``bertstream.pipelines.runners.dask_runner``, Beam's with its defects fixed): a ``dask scheduler`` and two ``dask
worker --nthreads 1`` processes on loopback, ``bertprep`` run against them as a user runs it; a worker killed
mid-run (Dask runs its tasks again elsewhere: the same dataset), or killed where no retry is allowed (one
``Error:`` line, nothing published).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from bertstream.cli.errors import UsageError
from bertstream.pipelines.cli import main
from bertstream.pipelines.common.dataset import RunResult, read_result
from bertstream.pipelines.common.files import absolute
from bertstream.pipelines.inputs.resolve import resolve_inputs
from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
from bertstream.pipelines.pretraining.pipeline import run_pretraining
from bertstream.pipelines.runners.runner import DASK_RUNNER, pipeline_options, runner_name
from bertstream.pipelines.vocab import VocabConfig, train_vocab
from bertstream.schemas.manifest import MANIFEST_NAME
from tests.beam_services import REPO, dask_cluster, deadline, portable_services
from tests.conftest import shared_path
from tests.jobs import run_classification
from tests.processes import HANG_GUARD_S

BEAM_DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
RUN_DEADLINE_S = HANG_GUARD_S  # a hang guard: the whole run, at any load


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    """One Wikipedia file and one book (Alice): 1.1 MB, about 5,000 instances at dupe 2."""
    wiki = shared_path("pretrain", "wikipedia", "wiki_00")
    book = shared_path("pretrain", "gutenberg", "11-0.txt")
    return [f"wikiextractor:{wiki}", f"text:{book}"]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("runners_vocab")
    train_vocab(corpus, out, VocabConfig(input_format="text", vocab_size=8000))
    return out / "vocab.txt"


def run(corpus: list[str], vocab: Path, out: Path, beam_args: list[str] | None = None) -> RunResult:
    cfg = PretrainingConfig(input_format="text", dupe_factor=2, num_shards=3, output_format="both")
    return run_pretraining(
        PretrainingJob(
            inputs=tuple(corpus), vocab=str(vocab), output=str(out), config=cfg, beam_args=tuple(beam_args or ())
        )
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus, vocab) -> RunResult:
    return run(corpus, vocab, tmp_path_factory.mktemp("runners_reference") / "out")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_same_dataset(ref: RunResult, got: RunResult, runner: str) -> None:
    """Every file byte for byte (the manifest's ``run`` section aside: times and options), and the
    manifest's shard list, counters and statistics equal."""
    for result in (ref, got):
        for s in result.manifest.shards:
            p = Path(result.output_dir, s.path)
            assert (p.stat().st_size, sha256(p)) == (s.bytes, s.sha256), f"{p} does not match its manifest entry"
    a, b = Path(ref.output_dir), Path(got.output_dir)
    files = {p.name: sha256(p) for p in sorted(a.iterdir()) if p.name != MANIFEST_NAME}
    assert {p.name: sha256(p) for p in sorted(b.iterdir()) if p.name != MANIFEST_NAME} == files
    assert len(files) == 7  # 3 Arrow + 3 WebDataset shards + vocab.txt; no _work left behind
    m, n = ref.manifest, got.manifest
    assert n.shards == m.shards
    assert n.counters == m.counters
    assert n.statistics == m.statistics
    assert n.totals == m.totals and m.totals["instances"] > 4000
    ja, jb = (json.loads((d / MANIFEST_NAME).read_text()) for d in (a, b))
    assert ja.pop("run")["runner"] == "FnApiRunner" and jb.pop("run")["runner"] == runner
    assert jb == ja


@pytest.mark.slow
@pytest.mark.shared_data
def test_portable_runner_with_external_worker_pool_gives_the_same_dataset(
    tmp_path, monkeypatch, corpus, vocab, reference
):
    monkeypatch.chdir(tmp_path)  # a relative --output: the workers run elsewhere (in services/)
    with portable_services(tmp_path / "services") as (beam_args, services):
        with deadline(RUN_DEADLINE_S, services, "the PortableRunner job"):
            got = run(corpus, vocab, Path("out"), [*beam_args, f"--setup_file={REPO / 'pyproject.toml'}"])
        pool_log = services[1].log.read_text(errors="replace")
    assert got.output_dir == str(tmp_path / "out")
    assert_same_dataset(reference, got, "PortableRunner")
    # The workers' Python cannot import this checkout (checked when it is made): they ran the staged sdist.
    assert "staged submission_environment_dependencies.txt, workflow.tar.gz" in pool_log
    assert "installing staged packages" in pool_log


@pytest.fixture(scope="module")
def dask(tmp_path_factory):
    """A scheduler and 2 single-threaded workers, separate processes on loopback (tests.beam_services)."""
    pytest.importorskip("distributed", reason="needs dask[distributed] (the test extra)")
    with dask_cluster(tmp_path_factory.mktemp("dask")) as cluster:
        yield cluster


def bertprep(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


def pretraining_args(corpus: list[str], vocab: Path, out: Path, address: str) -> list[str]:
    """``bertprep pretraining`` with :func:`run`'s parameters, on the Dask cluster at ``address``."""
    inputs = [a for c in corpus for a in ("--input", c)]
    return [
        "pretraining", *inputs, "--format", "text", "--vocab", str(vocab), "--output", str(out),
        "--dupe-factor", "2", "--num-shards", "3", "--output-format", "both",
        "--runner", "DaskRunner", f"--dask_client_address={address}",
    ]  # fmt: skip


def published(out: Path) -> list[str]:
    """What a run left in ``out`` (a failed run: nothing but what it found there)."""
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


@pytest.mark.slow
@pytest.mark.shared_data
def test_dask_runner_on_two_worker_processes_gives_the_same_dataset(tmp_path, corpus, vocab, reference, dask):
    r = bertprep(pretraining_args(corpus, vocab, tmp_path / "out", dask.address))
    assert r.exit_code == 0, r.output
    got = read_result(str(tmp_path / "out"), 0.0, 0)
    assert_same_dataset(reference, got, DASK_RUNNER)
    # Both workers ran tasks: the cluster, not one process, made the dataset.
    assert all(n > 10 for n in dask.tasks_run().values())


@pytest.mark.slow
@pytest.mark.shared_data
def test_dask_runner_task_classification_gives_the_same_dataset(tmp_path, vocab, dask):
    dev = str(shared_path("tasks", "sst2", "dev.tsv"))
    ref = run_classification(inputs=[dev], vocab=str(vocab), output=str(tmp_path / "ref"), glue="sst2", num_shards=2)
    args = ["task", "classification", "--input", dev, "--vocab", str(vocab), "--output", str(tmp_path / "out")]
    r = bertprep(
        [
            *args,
            "--glue",
            "sst2",
            "--num-shards",
            "2",
            "--runner",
            "DaskRunner",
            f"--dask_client_address={dask.address}",
        ]
    )
    assert r.exit_code == 0, r.output
    a, b = Path(ref.output_dir), tmp_path / "out"
    files = {p.name: sha256(p) for p in sorted(a.iterdir()) if p.name != MANIFEST_NAME}
    assert {p.name: sha256(p) for p in sorted(b.iterdir()) if p.name != MANIFEST_NAME} == files
    assert len(files) >= 3 and ref.manifest.totals["rows"] == 872
    ja, jb = (json.loads((d / MANIFEST_NAME).read_text()) for d in (a, b))
    assert ja.pop("run")["runner"] == "FnApiRunner" and jb.pop("run")["runner"] == DASK_RUNNER
    assert jb == ja


def kill_when_spilling(cluster, out: Path, worker: int) -> threading.Thread:
    """Kill ``worker`` (nanny and worker, SIGKILL) once the run has written its first spill file: mid-run."""

    def watch() -> None:
        deadline = time.monotonic() + RUN_DEADLINE_S
        while time.monotonic() < deadline and not list(out.glob("_work/*/train/*.bin")):
            time.sleep(0.05)
        killed.append(not (out / MANIFEST_NAME).exists())
        cluster.kill_worker(worker)

    killed: list[bool] = []
    t = threading.Thread(target=watch, daemon=True)
    t.killed = killed  # type: ignore[attr-defined]
    t.start()
    return t


@pytest.mark.slow
@pytest.mark.shared_data
def test_dask_run_that_loses_a_worker_completes_with_the_same_dataset(tmp_path, corpus, vocab, reference):
    pytest.importorskip("distributed", reason="needs dask[distributed] (the test extra)")
    with dask_cluster(tmp_path / "dask") as cluster:
        watcher = kill_when_spilling(cluster, tmp_path / "out", 1)
        r = bertprep(pretraining_args(corpus, vocab, tmp_path / "out", cluster.address))
        watcher.join(timeout=30)
        assert watcher.killed == [True]  # type: ignore[attr-defined]
        assert cluster.worker_count() == 1
    assert r.exit_code == 0, r.output  # Dask ran the lost worker's tasks again on the other one
    assert_same_dataset(reference, read_result(str(tmp_path / "out"), 0.0, 0), DASK_RUNNER)


@pytest.mark.slow
@pytest.mark.shared_data
def test_dask_run_that_may_not_retry_fails_in_one_line_and_publishes_nothing(tmp_path, corpus, vocab):
    pytest.importorskip("distributed", reason="needs dask[distributed] (the test extra)")
    no_retry = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    with dask_cluster(tmp_path / "dask", env=no_retry) as cluster:
        watcher = kill_when_spilling(cluster, tmp_path / "out", 1)
        r = bertprep(pretraining_args(corpus, vocab, tmp_path / "out", cluster.address))
        watcher.join(timeout=30)
    assert watcher.killed == [True]  # type: ignore[attr-defined]
    if r.exit_code == 0:  # the killed worker held nothing the run still needed: nothing to retry
        return
    lines = r.output.strip().splitlines()
    assert len(lines[lines.index(next(x for x in lines if x.startswith("Error:"))) :]) == 1, r.output
    assert "a Dask worker died" in r.output and "no manifest was written" in r.output
    assert published(tmp_path / "out") == []


def test_dask_runner_names_select_ours():
    pytest.importorskip("distributed", reason="needs dask[distributed] (the test extra)")
    for name in ("DaskRunner", "daskrunner", BEAM_DASK_RUNNER):
        options = pipeline_options([f"--runner={name}", "--dask_client_address=tcp://127.0.0.1:8786"])
        assert runner_name(options) == DASK_RUNNER


def test_local_paths_are_made_absolute_for_workers_elsewhere(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("One sentence. Another one.")
    monkeypatch.chdir(tmp_path)
    assert [f.path for f in resolve_inputs(["text:*.txt"])] == [str(tmp_path / "a.txt")]
    assert absolute("out") == str(tmp_path / "out") and absolute("gs://b/out") == "gs://b/out"


def test_options_of_a_runner_named_by_module_are_known():
    pytest.importorskip("distributed", reason="needs dask[distributed] (the test extra)")
    options = pipeline_options([f"--runner={BEAM_DASK_RUNNER}", "--dask_client_address=tcp://127.0.0.1:8786"])
    assert options.get_all_options()["address"] == "tcp://127.0.0.1:8786"
    with pytest.raises(UsageError, match="unknown option"):
        pipeline_options([f"--runner={BEAM_DASK_RUNNER}", "--dask_client_adress=tcp://127.0.0.1:8786"])
    with pytest.raises(UsageError, match="no_such_module.Runner: not one of the runners Beam documents"):
        pipeline_options(["--runner=no_such_module.Runner"])


@pytest.mark.parametrize("name", ["os.system", "subprocess.Popen", "builtins.exec", "NoSuchRunner"])
def test_only_the_runners_beam_documents_are_accepted(name, monkeypatch):
    """Every argument is used or refused (issue 33): Beam imports and calls any dotted --runner (os.system)."""
    import os

    monkeypatch.setattr(os, "system", lambda *a: pytest.fail("os.system was called"))
    with pytest.raises(UsageError, match=rf"--runner={name}: not one of the runners Beam documents \(DataflowRunner"):
        pipeline_options([f"--runner={name}"])
    for known in (
        "DirectRunner",
        "direct",
        "PortableRunner",
        "apache_beam.runners.portability.flink_runner.FlinkRunner",
    ):
        pipeline_options([f"--runner={known}"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["in/f2.txt", "in/f3.txt"], "2 argument\\(s\\) that are no option: in/f2.txt, in/f3.txt"),
        (["--runner", "DirectRunner", "x.txt"], "1 argument\\(s\\) that are no option: x.txt"),
        (["--direct-num-workers=2"], "--direct-num-workers \\(Beam's options are spelled with underscores"),
        (["--save_main_session", "in/f2.txt"], "no option: in/f2.txt"),
        # one line, always: a 129-line usage dump and an IndexError before
        (["--direct_num_workers=abc"], "--direct_num_workers=abc: not a valid int"),
        (["--direct_num_workers", "abc"], "--direct_num_workers=abc: not a valid int"),
        (["--direct_num_workers=-2"], "--direct_num_workers=-2: must be >= 0"),
        (["--direct_running_mode=fast"], "must be one of in_memory, multi_threading, multi_processing"),
    ],
)
def test_every_argument_left_to_beam_is_used_or_refused(args, message):
    """Beam's parser dropped these silently (the shell's other matches of an unquoted --input; an option
    spelled with dashes left at its default), and the manifest recorded them as the run's options (issue 33)."""
    with pytest.raises(UsageError, match=message):
        pipeline_options(args)
    options = pipeline_options(["--direct_num_workers", "2", "--runner=DirectRunner", "--save_main_session"])
    assert options.get_all_options()["direct_num_workers"] == 2


def test_dedup_settings_without_minhash_are_refused():
    from bertstream.pipelines.pretraining.config import PretrainingConfig

    with pytest.raises(UsageError, match="dedup_threshold: only applies with --dedup minhash"):
        PretrainingConfig(dedup_threshold=0.5)
    with pytest.raises(UsageError, match="dedup_ngram: only applies with --dedup minhash .*--dedup exact"):
        PretrainingConfig(dedup="exact", dedup_ngram=3)
    assert PretrainingConfig(dedup="minhash", dedup_threshold=0.5).dedup_threshold == 0.5


@pytest.mark.parametrize(
    "args, message",
    [
        (["--runner", "DirectRunner", "--runner=PortableRunner"], "--runner is given twice"),
        (["--direct_num_workers=2", "--direct_num_workers=3"], "--direct_num_workers is given twice"),
        (["--direct_running_mode=in_memory", "--direct_num_workers=2"], "in_memory runs in this process"),
        (["--streaming"], "--streaming: bertprep's pipelines are batch pipelines"),
    ],
)
def test_a_beam_option_given_twice_or_meaning_nothing_here_is_refused(args, message):
    """Beam's parser kept the last of two values; in_memory with workers ran worker processes all the same;
    --streaming was recorded as the run's option and ignored (issue 53)."""
    with pytest.raises(UsageError, match=message):
        pipeline_options(args)
    options = pipeline_options(
        ["--experiments=a", "--experiments=b", "--direct_num_workers=2", "--direct_num_workers=2"]
    )
    assert options.get_all_options()["experiments"] == ["a", "b"]


def test_direct_num_workers_0_is_one_worker_per_core(monkeypatch):
    """Beam's meaning, which --help says; it ran one worker in this process before (issue 53)."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert pipeline_options(["--direct_num_workers=0"]).get_all_options()["direct_num_workers"] == 2
