"""The object-store path end to end against a real S3 API (moto's server on 127.0.0.1, ``tests/s3_server.py``).

``bertprep pretraining`` reads its inputs and vocabulary from ``s3://``, keeps its work directory and writes
shards and manifest there; ``berttrain pretrain`` streams the shards with s3fs (sha256 of each checked),
trains a tiny model and resumes it (checkpoints are local: docs/pretraining.md, "Object stores (S3 and S3-compatible servers) end to end"); ``bertprep task`` and
``berttrain finetune`` do the same for a task. Then the failures: a corrupt object, a missing shard, and the
server stopped mid-run, each a clean error naming the URL within a bounded time.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import threading
import time

import pytest
from click.testing import CliRunner

from tests.conftest import shared_path

pytest.importorskip("s3fs", reason="needs s3fs (pip install -e '.[train]'): the trainer reads s3:// through it")
pytest.importorskip("torch", reason="needs torch (the train extra)")


class _Requests(logging.Handler):
    """The S3 requests moto's (werkzeug) server logs: ``"PUT /bucket/key HTTP/1.1"`` lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage()))  # werkzeug colours by status

    def paths(self, *methods: str) -> list[str]:
        out = []
        for line in self.lines:
            for method in methods:
                if f'"{method} /' in line:
                    out.append(line.split(f'"{method} ', 1)[1].split(" ", 1)[0])
        return out


@pytest.fixture()
def requests_log():
    handler, logger = _Requests(), logging.getLogger("werkzeug")
    old = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def _bertprep(*args: str) -> str:
    from bertstream.pipelines.cli import main

    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, f"bertprep {' '.join(args[:1])} exited {r.exit_code}:\n{r.output}\n{r.exception!r}"
    return r.output


def _upload(s3, bucket: str, key: str, path) -> str:
    s3.client().upload_file(str(path), bucket, key)
    return f"s3://{bucket}/{key}"


def _pretrain(data: str, out, **kw):
    from bertstream.trainer.config import TrainConfig
    from bertstream.trainer.metrics import read_metrics
    from bertstream.trainer.pretrain.loop import pretrain

    cfg = TrainConfig.build(
        **{
            "paths": (data,),
            "output": str(out),
            "preset": "tiny",
            "batch_size": 8,
            "max_steps": 20,
            "warmup_steps": 2,
            "lr": 1e-3,
            "log_every": 1,
            "checkpoint_every": 10,
            "num_workers": 0,
            "tensorboard": False,
            "deterministic": True,
            "seed": 1,
            "device": "cpu",
            **kw,
        }
    )
    pretrain(cfg)
    return [r for r in read_metrics(out) if r.get("split", "train") == "train"]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    """A 4,000-token uncased vocabulary trained on one shared Wikipedia file (a few seconds)."""
    from bertstream.pipelines.vocab import VocabConfig, train_vocab

    out = tmp_path_factory.mktemp("s3_vocab")
    train_vocab(
        [str(shared_path("pretrain", "wikipedia", "wiki_00"))],
        out,
        VocabConfig(input_format="wikiextractor", vocab_size=4000),
    )
    return out / "vocab.txt"


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory, vocab_file):
    """The same dataset made on a local disk, for the failure tests (uploaded object by object)."""
    from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
    from bertstream.pipelines.pretraining.pipeline import run_pretraining

    out = tmp_path_factory.mktemp("s3_local_shards")
    cfg = PretrainingConfig(input_format="wikiextractor", dupe_factor=1, num_shards=2)
    run_pretraining(
        PretrainingJob(
            inputs=tuple([str(shared_path("pretrain", "wikipedia", "wiki_00"))]),
            vocab=str(vocab_file),
            output=str(out),
            config=cfg,
        )
    )
    return out


@pytest.fixture()
def uploaded_dataset(s3_server, local_dataset):
    bucket = s3_server.bucket("bertstream")
    for f in sorted(local_dataset.iterdir()):
        _upload(s3_server, "bertstream", f"shards/{f.name}", f)
    return s3_server, f"{bucket}/shards"


@pytest.mark.slow
def test_pipeline_trainer_and_finetune_on_s3(s3_server, requests_log, tmp_path, vocab_file):
    """In one run, as a user would: bertprep over S3, berttrain pretrain (20 steps, then 10 + resume) from it,
    bertprep task + berttrain finetune over S3, with 0 and 2 DataLoader workers."""
    s3 = s3_server
    bucket = s3.bucket("bertstream")
    for name in ("wiki_00", "wiki_01"):  # their first ~300 KB each: enough for every check, a third of the time
        text = shared_path("pretrain", "wikipedia", name).read_text(encoding="utf-8")
        (tmp_path / name).write_text(text[: text.index("</doc>", 300_000) + len("</doc>\n")], encoding="utf-8")
        _upload(s3, "bertstream", f"corpus/{name}", tmp_path / name)
    vocab = _upload(s3, "bertstream", "vocab/vocab.txt", vocab_file)
    output = _bertprep(
        "pretraining",
        "--input",
        f"{bucket}/corpus/wiki_*",
        "--format",
        "wikiextractor",
        "--vocab",
        vocab,
        "--output",
        f"{bucket}/shards",
        "--dupe-factor",
        "1",
        "--num-shards",
        "2",
        "--verbose",  # the per-file lines, to see which object was read
        *s3.beam_args,
    )
    data = f"{bucket}/shards"
    # --- the pipeline: inputs read over HTTP, work directory and outputs on S3, _work/ gone afterwards
    assert "read s3://bertstream/corpus/wiki_00" in output and "s3://bertstream/shards/manifest.json" in output
    gets = requests_log.paths("GET")
    assert any(p.startswith("/bertstream/corpus/wiki_00") for p in gets)
    # spill files go up as multipart uploads (POST), small objects as PUT
    work_puts = [p for p in requests_log.paths("PUT", "POST") if p.startswith("/bertstream/shards/_work/")]
    assert work_puts, "no spill or pool object was written under OUTPUT/_work/ on S3"
    manifest = json.loads(s3.client().get_object(Bucket="bertstream", Key="shards/manifest.json")["Body"].read())
    assert manifest["inputs"][0]["path"] == "s3://bertstream/corpus/wiki_00" and manifest["totals"]["instances"] > 500
    keys = s3.keys("bertstream", "shards/")
    assert keys == [
        "shards/manifest.json",
        "shards/pretrain-00000-of-00002.arrow",
        "shards/pretrain-00001-of-00002.arrow",
        "shards/vocab.txt",
    ], keys  # no _work/ left

    # --- the trainer streams them with s3fs, hashes each, trains 20 steps; resumes from its local checkpoint
    requests_log.lines.clear()
    whole = _pretrain(data, tmp_path / "whole")
    assert [r["step"] for r in whole] == list(range(1, 21))
    shard_gets = {p.split("?")[0] for p in requests_log.paths("GET") if ".arrow" in p}
    assert shard_gets == {
        "/bertstream/shards/pretrain-00000-of-00002.arrow",
        "/bertstream/shards/pretrain-00001-of-00002.arrow",
    }, shard_gets
    # a run stopped after its step-10 checkpoint (as if killed), resumed with --resume auto: the data position
    # over S3 and everything else come back, so steps 11-20 log the uninterrupted run's losses
    split = tmp_path / "split"
    shutil.copytree(tmp_path / "whole" / "checkpoints" / "step-0000010", split / "checkpoints" / "step-0000010")
    lines = (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()
    (split / "metrics.jsonl").write_text("".join(f"{x}\n" for x in lines if json.loads(x)["step"] <= 10))
    resumed = _pretrain(data, split)
    assert [r["step"] for r in resumed] == list(range(1, 21))
    assert [r["loss"] for r in resumed] == [r["loss"] for r in whole]
    assert (split / "checkpoints" / "step-0000020" / "state.json").is_file()  # checkpoints are local

    # --- a task dataset on S3 and fine-tuning from it
    from bertstream.trainer.finetune.config import FinetuneConfig
    from bertstream.trainer.finetune.loop import finetune

    src = shared_path("tasks", "sst2")
    for split, n in (("train", 161), ("dev", 81)):
        tsv = tmp_path / f"{split}.tsv"
        with (src / f"{split}.tsv").open(encoding="utf-8") as f:
            tsv.write_text("".join(line for _, line in zip(range(n), f)), encoding="utf-8")
        url = _upload(s3, "bertstream", f"tasks/sst2/{split}.tsv", tsv)
        _bertprep(
            "task",
            "classification",
            "--glue",
            "sst2",
            "--input",
            url,
            "--split",
            split,
            "--vocab",
            "s3://bertstream/vocab/vocab.txt",
            "--output",
            f"s3://bertstream/tasks/sst2_{split}",
            "--max-seq-length",
            "64",
            *s3.beam_args,
        )
    assert "tasks/sst2_train/manifest.json" in s3.keys("bertstream", "tasks/")

    def run(workers: int, out: str) -> dict:
        return finetune(
            FinetuneConfig.build(
                task="classification",
                train_data="s3://bertstream/tasks/sst2_train",
                eval_data="s3://bertstream/tasks/sst2_dev",
                init="random:tiny",
                output=str(tmp_path / out),
                epochs=1,
                batch_size=16,
                lr=1e-3,
                tensorboard=False,
                log_every=5,
                num_workers=workers,
                device="cpu",
            )
        )

    requests_log.lines.clear()
    results = run(0, "ft")
    assert any("/bertstream/tasks/sst2_dev/" in p for p in requests_log.paths("GET"))
    assert results["epochs"][0]["eval"]["rows"] == 80  # every dev row, read from S3, scored
    assert 0 <= results["best"]["value"] <= 1 and (tmp_path / "ft" / "results.json").is_file()
    # with two DataLoader workers (forks, each with its own s3fs client): the same training
    two = run(2, "ft2")
    assert two["epochs"][0]["eval"]["rows"] == 80
    assert two["epochs"][0]["train_loss"] == results["epochs"][0]["train_loss"]


def _corrupt(s3, bucket: str, key: str) -> None:
    body = bytearray(s3.client().get_object(Bucket=bucket, Key=key)["Body"].read())
    body[len(body) // 2] ^= 0xFF  # same size: only the sha256 can tell
    s3.client().put_object(Bucket=bucket, Key=key, Body=bytes(body))


def test_corrupt_and_missing_shards_on_s3_are_named(uploaded_dataset, tmp_path):
    from bertstream.trainer.data.refs import ShardError

    s3, data = uploaded_dataset
    url = f"{data}/pretrain-00001-of-00002.arrow"
    _corrupt(s3, "bertstream", "shards/pretrain-00001-of-00002.arrow")
    with pytest.raises(ShardError, match=f"shard {url}: content hashes to .* not the manifest sha256"):
        _pretrain(data, tmp_path / "corrupt")
    s3.client().delete_object(Bucket="bertstream", Key="shards/pretrain-00001-of-00002.arrow")
    with pytest.raises(ShardError, match=f"shard {url}: is missing"):
        _pretrain(data, tmp_path / "missing")


def _within(seconds: float, fn):
    """Run ``fn`` in a thread; its exception (or None), or a test failure if it is still running after
    ``seconds``: a hang is what this guards against."""
    box: dict = {}

    def target():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    start = time.monotonic()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still waiting {seconds} s after the S3 server stopped: an unbounded wait"
    return box.get("error"), time.monotonic() - start


def test_server_stopped_mid_training_fails_cleanly_and_soon(uploaded_dataset, tmp_path, monkeypatch):
    from bertstream.trainer.data import refs

    s3, data = uploaded_dataset
    real = refs.read_buffer
    stopped = []

    def stop_then_read(ref):  # the first shard read of the run: the network goes away under it
        if not stopped:
            s3.stop()
            stopped.append(time.monotonic())
        return real(ref)

    monkeypatch.setattr(refs, "read_buffer", stop_then_read)
    monkeypatch.setattr("bertstream.trainer.data.shards.read_buffer", stop_then_read, raising=False)
    error, took = _within(120, lambda: _pretrain(data, tmp_path / "run"))
    assert stopped, "the run never read a shard"
    assert error is not None, "training went on without its data"
    text = f"{type(error).__name__}: {error}"
    assert "s3://bertstream/shards/pretrain-" in text and "cannot be read (ConnectionError" in text, text
    print(f"[s3-fault] {took:.1f} s after the stop: {text}")
    assert "Traceback" not in text and took < 120


def test_server_stopped_mid_pipeline_fails_cleanly_and_soon(s3_server, vocab_file, monkeypatch):
    import bertstream.pipelines.pretraining.group as group
    from bertstream.pipelines.cli import main

    s3 = s3_server
    bucket = s3.bucket("bertstream")
    _upload(s3, "bertstream", "corpus/wiki_00", shared_path("pretrain", "wikipedia", "wiki_00"))
    vocab = _upload(s3, "bertstream", "vocab/vocab.txt", vocab_file)
    real, stopped = group.write_file, []

    def stop_then_write(path, chunks):  # the first spill file of the run: the network goes away under it
        if not stopped:
            s3.stop()
            stopped.append(path)
        return real(path, chunks)

    monkeypatch.setattr(group, "write_file", stop_then_write)
    monkeypatch.setattr("bertstream.pipelines.common.output_dir.CLEANUP_SECONDS", 5.0)  # 30 s by default
    box = {}
    _, took = _within(
        180,
        lambda: box.setdefault(
            "r",
            CliRunner().invoke(
                main,
                [
                    "pretraining",
                    "--input",
                    f"{bucket}/corpus/wiki_00",
                    "--format",
                    "wikiextractor",
                    "--vocab",
                    vocab,
                    "--output",
                    f"{bucket}/shards",
                    "--dupe-factor",
                    "1",
                    "--num-shards",
                    "2",
                    *s3.beam_args,
                ],
            ),
        ),
    )
    r = box["r"]
    assert stopped and stopped[0].startswith("s3://bertstream/shards/_work/"), r.output
    print(f"[s3-fault] pipeline: exit {r.exit_code} {took:.1f} s after the stop:\n{r.output[-2000:]}\n{r.exception!r}")
    assert r.exit_code == 1, (r.output, r.exception)
    assert "Traceback" not in r.output and r.output.rstrip().splitlines()[-1].startswith("Error:")
    error = r.output.rstrip().splitlines()[-1]
    # The object named: a spill file of this run, under _work/RUN_ID/.
    assert re.search(r"/bertstream/shards/_work/[^/]+/train/docs-", error) and "no manifest was written" in error
    assert "could not remove the work directory s3://bertstream/shards/_work" in r.output  # leftovers named
    assert took < 60


def test_run_folders_on_an_object_store_are_refused_up_front():
    # Checkpoints are local (docs/pretraining.md, "Object stores (S3 and S3-compatible servers) end to end"): a run folder URL used to become a local folder named
    # "s3:" (pathlib drops one slash). Refused before anything runs, naming the flag.
    from bertstream.cli.errors import UsageError
    from bertstream.trainer.config import TrainConfig
    from bertstream.trainer.finetune.config import FinetuneConfig

    with pytest.raises(UsageError, match="output: s3://b/runs/base: the run folder must be local"):
        TrainConfig.build(paths=("s3://b/shards",), output="s3://b/runs/base")
    with pytest.raises(UsageError, match="output: s3://b/runs/sst2: the run folder must be local"):
        FinetuneConfig.build(
            task="classification",
            train_data="s3://b/t",
            eval_data="s3://b/d",
            init="random:tiny",
            output="s3://b/runs/sst2",
        )


def test_trainer_s3_waits_are_bounded_unless_configured(monkeypatch):
    import fsspec

    from bertstream.trainer.data.refs import S3_RETRIES, S3_TIMEOUTS, _storage_options

    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    monkeypatch.delenv("AWS_RETRY_MODE", raising=False)
    monkeypatch.setitem(fsspec.config.conf, "s3", {})
    assert _storage_options("s3://b/ds") == {"config_kwargs": {**S3_TIMEOUTS, "retries": S3_RETRIES}}
    assert _storage_options("/data/ds") == {} and _storage_options("gs://b/ds") == {}
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "9")  # botocore's own environment wins over our retries
    monkeypatch.setitem(fsspec.config.conf, "s3", {"config_kwargs": {"read_timeout": 300}})  # FSSPEC_S3=...
    assert _storage_options("s3://b/ds") == {"config_kwargs": {"connect_timeout": 10, "read_timeout": 300}}


def test_corrupt_and_missing_task_shards_on_s3_are_named(s3_server, vocab_file, tmp_path):
    from bertstream.schemas import tasks as T
    from bertstream.trainer.finetune.data import TaskDataError, load_task_data
    from bertstream.trainer.finetune.tasks import get_task
    from tests.jobs import run_classification

    tsv = tmp_path / "dev.tsv"
    with shared_path("tasks", "sst2", "dev.tsv").open(encoding="utf-8") as f:
        tsv.write_text("".join(line for _, line in zip(range(41), f)), encoding="utf-8")
    local = tmp_path / "sst2_dev"
    run_classification(
        inputs=[str(tsv)], vocab=str(vocab_file), output=str(local), glue="sst2", split="dev", max_seq_length=64
    )
    s3_server.bucket("bertstream")
    for f in sorted(local.iterdir()):
        _upload(s3_server, "bertstream", f"ds/{f.name}", f)
    root = "s3://bertstream/ds"
    assert load_task_data(root, get_task(T.CLASSIFICATION), role="--eval-data") is not None  # intact: loads
    shard = next(k for k in s3_server.keys("bertstream", "ds/") if k.endswith(".arrow"))
    _corrupt(s3_server, "bertstream", shard)
    with pytest.raises(TaskDataError, match=f"--eval-data {root}: shard s3://bertstream/{shard} does not match"):
        load_task_data(root, get_task(T.CLASSIFICATION), role="--eval-data")
    s3_server.client().delete_object(Bucket="bertstream", Key=shard)
    with pytest.raises(TaskDataError, match=f"shard s3://bertstream/{shard} is missing"):
        load_task_data(root, get_task(T.CLASSIFICATION), role="--eval-data")


def test_an_endpoint_that_never_answers_fails_in_bounded_time(monkeypatch):
    """A black hole (accepts the connection, never sends a byte): botocore's read timeout ends each attempt,
    retries are counted, and the trainer gets an OSError naming the URL, not a hang. Timeouts shortened with
    the same knobs a user has (fsspec's s3 config, AWS_MAX_ATTEMPTS)."""
    import fsspec

    from bertstream.trainer.data.refs import filesystem
    from bertstream.trainer.data.sources import load_manifest

    sink = socket.socket()
    sink.bind(("127.0.0.1", 0))
    sink.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        sink.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sink.accept()[0])
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    host, port = sink.getsockname()
    for k, v in {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "2",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"config_kwargs": {"connect_timeout": 1, "read_timeout": 1}})
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    filesystem.cache_clear()
    try:
        error, took = _within(60, lambda: load_manifest("s3://blackhole/ds"))
    finally:
        stop.set()
        for c in held:
            c.close()
        sink.close()
        s3fs.S3FileSystem.clear_instance_cache()
        filesystem.cache_clear()
    assert isinstance(error, OSError) and "s3://blackhole/ds/manifest.json" in str(error), repr(error)
    assert "Timeout" in str(error) and held, str(error)  # it did connect, and gave up on the reads
    print(f"[s3-fault] black hole: {took:.1f} s: {error}")
    assert took < 30


def test_pretraining_streams_from_s3_with_two_loader_workers(uploaded_dataset, local_dataset, tmp_path):
    """How the trainer runs on a cluster: shards on an object store, read by DataLoader workers. A worker is a
    fork of the main process, whose s3fs client (an asyncio loop, aiohttp sessions) is not fork-safe: each
    worker must make its own. With two workers the run trains, and its losses are those of the same run read
    from a local copy of the shards."""
    _, data = uploaded_dataset
    remote = _pretrain(data, tmp_path / "remote", num_workers=2, max_steps=6, checkpoint_every=6)
    local = _pretrain(str(local_dataset), tmp_path / "local", num_workers=2, max_steps=6, checkpoint_every=6)
    assert [r["step"] for r in remote] == list(range(1, 7))
    assert [r["loss"] for r in remote] == [r["loss"] for r in local]


def test_vocab_writes_to_an_object_store_and_holds_it_like_a_folder(s3_server, tmp_path, monkeypatch):
    """``bertprep vocab --output s3://...`` writes its four files there (it once wrote a local ``s3:/`` folder),
    and refuses to mix into a prefix that holds something else, as every bertprep command does."""
    s3 = s3_server
    bucket = s3.bucket("bertstream")
    monkeypatch.chdir(tmp_path)  # a local "s3:" folder would appear here
    corpus = _upload(s3, "bertstream", "corpus/wiki_00", shared_path("pretrain", "wikipedia", "wiki_00"))
    args = ["vocab", "--input", f"wikiextractor:{corpus}", "--vocab-size", "600", "--output", f"{bucket}/vocab"]
    output = _bertprep(*args)
    assert f"-> {bucket}/vocab/vocab.txt" in output
    keys = sorted(o["Key"] for o in s3.client().list_objects_v2(Bucket="bertstream", Prefix="vocab/")["Contents"])
    assert keys == ["vocab/tokenizer.json", "vocab/tokenizer_config.json", "vocab/vocab.txt", "vocab/vocab_config.json"]
    assert not (tmp_path / "s3:").exists() and not list(tmp_path.iterdir())
    body = s3.client().get_object(Bucket="bertstream", Key="vocab/vocab.txt")["Body"].read().decode()
    assert body.split("\n")[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

    from bertstream.pipelines.cli import main

    again = CliRunner().invoke(main, args)  # an earlier vocabulary: --overwrite, as for a local folder
    assert again.exit_code == 2 and "already holds a vocabulary" in again.output, again.output
    assert _bertprep(*args, "--overwrite")
    _upload(s3, "bertstream", "other/notes.txt", shared_path("pretrain", "sample_text.txt"))
    foreign = CliRunner().invoke(main, [*args[:-1], f"{bucket}/other", "--overwrite"])
    assert foreign.exit_code == 2 and "not a vocabulary's (notes.txt)" in foreign.output, foreign.output
