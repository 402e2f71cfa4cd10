"""Every ``berttrain`` command, given bad arguments, ends in one ``Error:`` line and exit 2 (usage) or 1 (run
time), never a traceback (issue 13, section 2)."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bertstream.cli.errors import Terminated
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.cli import main
from tests.argv import with_flags
from tests.processes import ctrl_c_reaches_it
from tests.trainer.test_run_safety import small_dataset

FAST = [
    "--batch-size",
    "4",
    "--max-steps",
    "2",
    "--warmup-steps",
    "1",
    "--checkpoint-every",
    "2",
    "--num-workers",
    "0",
    "--no-tensorboard",
]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """A dataset, one with another vocabulary, a corrupt one, a finished run and broken run folders."""
    root = tmp_path_factory.mktemp("cli_errors")
    ds = small_dataset(root / "ds")
    other = small_dataset(root / "other", vocab_size=1300)
    corrupt = root / "corrupt"
    shutil.copytree(ds, corrupt)
    shard = sorted(corrupt.glob("*.arrow"))[0]
    shard.write_bytes(b"\0" * shard.stat().st_size)  # same size, wrong content
    late = root / "late"  # the second shard is damaged: only the loader worker that opens it finds out
    shutil.copytree(ds, late)
    shard = sorted(late.glob("*.arrow"))[1]
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    badschema = root / "badschema"
    shutil.copytree(ds, badschema)
    m = json.loads((badschema / "manifest.json").read_text())
    m["schema_version"] = 999
    (badschema / "manifest.json").write_text(json.dumps(m))
    badvocab = root / "badvocab"  # shards whose schema metadata names another vocabulary than the manifest
    shutil.copytree(ds, badvocab)
    m = json.loads((badvocab / "manifest.json").read_text())
    m["vocab"]["sha256"] = json.loads((other / "manifest.json").read_text())["vocab"]["sha256"]
    (badvocab / "manifest.json").write_text(json.dumps(m))
    shutil.copy(other / "vocab.txt", badvocab / "vocab.txt")
    run = root / "run"
    result = CliRunner().invoke(main, ["pretrain", "--data", str(ds), "--output", str(run), *FAST])
    assert result.exit_code == 0, result.output
    position = root / "position"  # a checkpoint whose data position is damaged
    shutil.copytree(run, position)
    state_file = ckpt.step_dir(position, 2) / "state.json"
    state = json.loads(state_file.read_text())
    state["data"]["format"] = "something-else"
    state_file.write_text(json.dumps(state))
    no_opt = root / "no_opt"
    shutil.copytree(ckpt.step_dir(run, 2), no_opt)
    (no_opt / "optimizer.pt").unlink()
    badopt = root / "badopt"  # a run whose newest optimizer.pt holds other parameter groups
    shutil.copytree(run, badopt)
    torch.save({"state": {}, "param_groups": [{"params": [0], "lr": 0.1}]}, ckpt.step_dir(badopt, 2) / "optimizer.pt")
    junkrng = root / "junkrng"  # a run whose newest rng.pt is junk bytes (it was "KeyError: 1785425525")
    shutil.copytree(run, junkrng)
    (ckpt.step_dir(junkrng, 2) / "rng.pt").write_bytes(b"junk, not a torch file " * 8)
    pickledopt = root / "pickledopt"  # a run whose newest optimizer.pt holds a pickled object, not tensors
    shutil.copytree(run, pickledopt)
    torch.save(
        {"state": {}, "param_groups": [], "x": argparse.Namespace()}, ckpt.step_dir(pickledopt, 2) / "optimizer.pt"
    )
    empty_ckpt = root / "empty_ckpt"
    empty_ckpt.mkdir()
    (root / "model.json").write_text("{not json")
    torn = root / "torn"
    torn.mkdir()
    (torn / "metrics.jsonl").write_text('{"step": 1, "loss": 1}\n{"step": 2, oops\n{"step": 3, "loss": 1}\n')
    return {
        "root": root,
        "ds": ds,
        "other": other,
        "corrupt": corrupt,
        "badschema": badschema,
        "late": late,
        "badvocab": badvocab,
        "run": run,
        "position": position,
        "no_opt": no_opt,
        "empty_ckpt": empty_ckpt,
        "badopt": badopt,
        "junkrng": junkrng,
        "pickledopt": pickledopt,
        "torn": torn,
    }


def pretrain(w: dict[str, Path], *args: str, data: str = "ds", out: str | None = None) -> list[str]:
    output = str(w["root"] / (out or "fresh")) if out != "" else None
    return [
        "pretrain",
        "--data",
        str(w[data]) if data in w else data,
        *(["--output", output] if output else []),
        *with_flags(FAST, args),
    ]


# (name, argv builder, exit code, text the Error line must hold)
CASES = [
    ("pretrain --device tpu", lambda w: pretrain(w, "--device", "tpu"), 2, "must be auto, cpu, cuda or cuda:N"),
    ("pretrain --batch-size 0", lambda w: pretrain(w, "--batch-size", "0"), 2, "must be an integer >= 1"),
    (  # round 7: the run trained, evaluated nothing and said nothing
        "pretrain --eval-every without --eval-data",
        lambda w: pretrain(w, "--eval-every", "1"),
        2,
        "--eval-every without --eval-data: there is nothing to evaluate",
    ),
    ("pretrain duplicate --data", lambda w: pretrain(w, "--data", str(w["ds"]) + "/./"), 2, "more than once"),
    ("pretrain no --output", lambda w: pretrain(w, out=""), 2, "Missing option '--output'"),
    ("pretrain missing --data", lambda w: pretrain(w, data="/nonexistent/ds"), 1, "no manifest"),
    ("pretrain ShardError", lambda w: pretrain(w, data="corrupt"), 1, "--skip-corrupt"),
    (
        "pretrain ShardError in a loader worker",
        lambda w: pretrain(w, "--num-workers", "1", "--max-steps", "30", data="late", out="late_run"),
        1,
        "pretrain-00001-of-00002.arrow: content hashes to",
    ),
    ("pretrain SchemaError", lambda w: pretrain(w, data="badschema"), 1, "schema"),
    # a field whose flag is not its name: the error names the flag (--data), not the field (paths)
    ("pretrain --data DIR:0", lambda w: ["pretrain", "--data", f"{w['ds']}:0", "--output", "o"], 2, "'--data'"),
    ("pretrain VocabMismatchError", lambda w: pretrain(w, data="badvocab"), 1, "vocab"),
    (
        "pretrain other --eval-data vocabulary",
        lambda w: pretrain(w, "--eval-data", str(w["other"])),
        1,
        "another vocabulary",
    ),
    (
        "pretrain fewer samples than one batch",
        lambda w: pretrain(w, "--batch-size", "100000"),
        1,
        "fewer than one global batch",
    ),
    (
        "pretrain --resume none into a used folder",
        lambda w: pretrain(w, "--resume", "none", out="run"),
        2,
        "--overwrite",
    ),
    ("pretrain changed --lr on resume", lambda w: pretrain(w, "--lr", "0.5", out="run"), 1, "--lr 0.5"),
    ("pretrain data-position mismatch", lambda w: pretrain(w, out="position"), 1, "data position"),
    ("pretrain CheckpointError", lambda w: pretrain(w, "--resume", str(w["no_opt"])), 1, "lacks optimizer.pt"),
    (
        "pretrain bad --model-config",
        lambda w: pretrain(w, "--model-config", str(w["root"] / "model.json")),
        1,
        "--model-config",
    ),
    (  # round 8: an IndexError traceback at the first step (the rows' segment B is token type 1)
        "pretrain --model-config of one token type",
        lambda w: (
            (w["root"] / "one_type.json").write_text('{"type_vocab_size": 1}'),
            pretrain(w, "--model-config", str(w["root"] / "one_type.json")),
        )[1],
        1,
        "type_vocab_size 1, but pretraining rows hold two segments",
    ),
    (
        "pretrain --init-from a non-HF folder",
        lambda w: pretrain(w, "--init-from", str(w["empty_ckpt"])),
        1,
        str(Path("empty_ckpt")),
    ),
    ("pretrain --resume missing", lambda w: pretrain(w, "--resume", "/nonexistent/ck"), 1, "no such checkpoint"),
    (
        "export-hf missing folder",
        lambda w: ["export-hf", "/nonexistent/ck", str(w["root"] / "hf")],
        2,
        "does not exist",
    ),
    (
        "export-hf incomplete checkpoint",
        lambda w: ["export-hf", str(w["empty_ckpt"]), str(w["root"] / "hf")],
        1,
        "checkpoint lacks",
    ),
    # issue 33, one line always: each of these was a traceback
    ("pretrain --seed 2**70", lambda w: pretrain(w, "--seed", str(2**70)), 2, "must be at most 2**63 - 1"),
    (
        "pretrain optimizer.pt of other parameter groups",
        lambda w: pretrain(w, "--max-steps", "3", out="badopt"),
        1,
        "its optimizer state (optimizer.pt) does not fit this run's model (ValueError",
    ),
    ("plot --output plot.txt", lambda w: ["plot", str(w["run"]), "--output", "plot.txt"], 1, "name an image file"),
    ("plot folder without metrics", lambda w: ["plot", str(w["empty_ckpt"])], 1, "no metrics.jsonl"),
    ("plot damaged metrics", lambda w: ["plot", str(w["torn"])], 1, "metrics.jsonl:2: not a JSON record"),
    (
        "plot --baseline-from missing",
        lambda w: ["plot", str(w["run"]), "--baseline-from", "/nonexistent/ds"],
        1,
        "no manifest",
    ),
    (
        "finetune --device tpu",
        lambda w: [
            "finetune",
            "--task",
            "classification",
            "--train-data",
            "a",
            "--eval-data",
            "b",
            "--init",
            "random:tiny",
            "--output",
            "o",
            "--device",
            "tpu",
        ],
        2,
        "cuda:N",
    ),
    (
        "finetune missing --train-data",
        lambda w: [
            "finetune",
            "--task",
            "classification",
            "--train-data",
            "/nonexistent/t",
            "--eval-data",
            "/nonexistent/e",
            "--init",
            "random:tiny",
            "--output",
            str(w["root"] / "ft"),
        ],
        1,
        "/nonexistent/t",
    ),
]
# issue 44, bounded requests: a count that becomes processes has the machine's ceiling (it forked 968 and took 15 GB)
FINETUNE = ["finetune", "--task", "classification", "--train-data", "a", "--eval-data", "b", "--init", "random:tiny"]
CASES += [
    (
        "pretrain --num-workers 100000",
        lambda w: pretrain(w, "--num-workers", "100000"),
        2,
        "'--num-workers': 100000 is more than this machine runs: at most",
    ),
    (
        "finetune --num-workers 100000",
        lambda w: [*FINETUNE, "--output", "o", "--num-workers", "100000"],
        2,
        "'--num-workers': 100000 is more than this machine runs: at most",
    ),
]
# issue 44, one line always: each of these was a traceback or an unclear line
CASES += [
    ("pretrain --lr 1e300", lambda w: pretrain(w, "--lr", "1e300"), 2, "'--lr': must be at most 3.403e+38 (a float32)"),
    ("finetune --lr 1e300", lambda w: [*FINETUNE, "--output", "o", "--lr", "1e300"], 2, "must be at most 3.403e+38"),
    (
        "pretrain junk rng.pt",
        lambda w: pretrain(w, "--resume", str(ckpt.step_dir(w["junkrng"], 2))),
        1,
        "step-0000002/rng.pt: cannot be read as a plain tensor dict (KeyError; damaged or no torch file)",
    ),
    (
        "pretrain pickled optimizer.pt",  # refused without torch's advice to load it with weights_only=False
        lambda w: pretrain(w, "--resume", str(ckpt.step_dir(w["pickledopt"], 2))),
        1,
        "optimizer.pt: cannot be read as a plain tensor dict (it holds a pickled argparse.Namespace, refused)",
    ),
]
CASES += [  # issue 44, new cases: an empty argument was the current folder, no folder at all, or a seed that overflowed
    ("pretrain --output ''", lambda w: [*pretrain(w, out=""), "--output", ""], 2, "'--output': is required"),
    ("pretrain --data ''", lambda w: pretrain(w, data=""), 2, "--data '' names no folder"),
    ("pretrain --eval-data ''", lambda w: pretrain(w, "--eval-data", ""), 2, "'--eval-data': names no folder"),
    ("pretrain --resume ''", lambda w: pretrain(w, "--resume", ""), 2, "'--resume': names no checkpoint"),
    ("pretrain --seed 2**63-1", lambda w: pretrain(w, "--seed", str(2**63 - 1)), 2, "must be at most 2**32 - 1"),
    ("export-hf OUT ''", lambda w: ["export-hf", str(w["run"]), ""], 1, "OUT is empty ('')"),
    ("plot --output ''", lambda w: ["plot", str(w["run"]), "--output", ""], 1, "--output '' names no file"),
    ("plot --baseline-from ''", lambda w: ["plot", str(w["run"]), "--baseline-from", ""], 1, "--baseline-from ''"),
]
if not torch.cuda.is_available():
    CASES.append(
        ("pretrain --device cuda without a GPU", lambda w: pretrain(w, "--device", "cuda"), 1, "no CUDA GPU is visible")
    )


@pytest.mark.parametrize(("argv", "code", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_arguments_end_in_one_error_line(world, argv, code, text):
    result = CliRunner().invoke(main, argv(world))
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # not an uncaught error (a traceback)
    assert "Traceback" not in result.output
    assert len(errors) == 1 and text in errors[0], result.stderr


# --- issue 17: the principles, each tested over a class of cases -------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def one_error(result, code: int, text: str) -> str:
    """The run ended with exit ``code`` and exactly one ``Error:`` line holding ``text``, no traceback."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert len(errors) == 1 and text in errors[0], result.stderr
    return errors[0]


def berttrain(*args: str, block: str = "", timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """``berttrain ARGS`` in a fresh process; ``block``: modules made unimportable first (``sys.modules[name] =
    None`` is Python's own way to make an import fail), as on a machine without that optional package."""
    prog = f"import sys\nfor m in {block.split()!r}: sys.modules[m] = None\nfrom bertstream.trainer.cli import main\nmain()"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-c", prog, *args], capture_output=True, text=True, env=env, timeout=timeout, **kw
    )


def clean_error(r: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """A process ended with exit ``code``, its last line the one ``Error:`` line, holding ``needles``."""
    text = r.stdout + r.stderr
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    assert r.returncode == code, text
    assert "Traceback" not in text, text
    assert len(errors) == 1 and lines[-1] == errors[0], text
    for needle in needles:
        assert needle in errors[0], text
    return errors[0]


def finished_run(w: dict[str, Path], name: str) -> tuple[Path, list[str]]:
    """A copy of the finished run and the names of its checkpoints."""
    run = w["root"] / name
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(w["run"], run)
    return run, [p.name for p in ckpt.list_checkpoints(run)]


# Every input of pretrain given wrong, with --overwrite over a finished run (item: "never destroys before it
# has checked its inputs"): the run's checkpoints are all still there afterwards.
BAD_INPUTS = [
    ("mistyped --data", lambda w: ["--data", str(w["root"] / "dss")], "no manifest"),
    ("missing --eval-data", lambda w: ["--eval-data", str(w["root"] / "nope")], "no manifest"),
    ("--eval-data of another vocabulary", lambda w: ["--eval-data", str(w["other"])], "another vocabulary"),
    ("--init-from not HF", lambda w: ["--init-from", str(w["empty_ckpt"])], "empty_ckpt"),
    ("bad --model-config", lambda w: ["--model-config", str(w["root"] / "model.json")], "--model-config"),
    ("missing --resume", lambda w: ["--resume", str(w["root"] / "nope")], "no such checkpoint"),
    ("corrupt --data", lambda w: ["--data", str(w["corrupt"])], "--skip-corrupt"),
    ("--data of another schema", lambda w: ["--data", str(w["badschema"])], "schema"),
    ("batch larger than the data", lambda w: ["--batch-size", "100000"], "fewer than one global batch"),
]


@pytest.mark.parametrize(("args", "text"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_overwrite_clears_nothing_before_every_input_is_checked(world, args, text):
    run, before = finished_run(world, "overwrite_target")
    config = (run / "config.json").read_text()
    argv = pretrain(world, "--overwrite", "--resume", "none", out="overwrite_target")
    given = args(world)
    if "--data" in given:  # replaces the default --data
        i = argv.index("--data")
        argv[i + 1] = given[given.index("--data") + 1]
        given = [x for j, x in enumerate(given) if j not in (given.index("--data"), given.index("--data") + 1)]
    if "--resume" in given:
        i = argv.index("--resume")
        del argv[i : i + 2]
    one_error(CliRunner().invoke(main, with_flags(argv, given)), 1, text)
    assert [p.name for p in ckpt.list_checkpoints(run)] == before and before
    assert (run / "config.json").read_text() == config and (run / "metrics.jsonl").is_file()


@pytest.mark.parametrize("flag", ["--eval-data", "--init-from", "--model-config"])
def test_an_input_inside_output_is_never_cleared_by_overwrite(world, flag):
    run, before = finished_run(world, "overlap")
    inside = run / "inputs"
    if flag == "--eval-data":
        shutil.copytree(world["ds"], inside)
    elif flag == "--init-from":
        from bertstream.trainer.hf.export import export_checkpoint

        export_checkpoint(ckpt.step_dir(world["run"], 2), inside)
    else:
        inside.mkdir()
        inside = inside / "model.json"
        inside.write_text('{"hidden_size": 64}')
    listed = sorted(p.name for p in run.rglob("*"))
    result = CliRunner().invoke(
        main, pretrain(world, "--overwrite", "--resume", "none", flag, str(inside), out="overlap")
    )
    one_error(result, 2, f"overlaps inputs: {flag} {inside} lies inside it")
    assert sorted(p.name for p in run.rglob("*")) == listed  # nothing removed


@pytest.mark.parametrize(
    "args",
    [
        ["--data", "nope"],
        ["--eval-data", "nope"],
        ["--init-from", "EMPTY"],
        ["--max-steps", "30", "--num-workers", "1", "--data", "LATE"],  # fails in a loader worker, mid-epoch
    ],
    ids=["missing --data", "missing --eval-data", "bad --init-from", "shard error in a worker"],
)
def test_a_run_that_fails_before_it_keeps_anything_leaves_no_folder(world, tmp_path, args):
    args = [{"EMPTY": str(world["empty_ckpt"]), "LATE": str(world["late"])}.get(a, a) for a in args]
    out = tmp_path / "runs" / "x"
    argv = pretrain(world, "--log-every", "100", "--checkpoint-every", "100")
    argv[argv.index("--output") + 1] = str(out)
    if "--data" in args:
        argv[argv.index("--data") + 1] = args[args.index("--data") + 1]
        args = args[: args.index("--data")]
    result = CliRunner().invoke(main, with_flags(argv, args))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert not (tmp_path / "runs").exists()  # neither runs/x/ nor the runs/ made for it


def test_every_float_option_refuses_inf_and_nan():
    # --lr inf passed "> 0" and trained to NaN logits: every float setting of every command must be finite.
    from bertstream.cli import options
    from bertstream.cli.errors import UsageError
    from bertstream.trainer.config import TrainConfig
    from bertstream.trainer.finetune.config import FinetuneConfig

    required = {
        TrainConfig: {"paths": ("d",), "output": "o"},
        FinetuneConfig: {
            "task": "classification",
            "train_data": "t",
            "eval_data": "e",
            "init": "random:tiny",
            "output": "o",
        },
    }
    tried = []
    for cls, base in required.items():
        for leaf in options.leaves(cls):
            base_type, multiple = options._base_type(leaf.type)
            if base_type is not float:
                continue
            for value in (float("inf"), float("-inf"), float("nan")):
                with pytest.raises(UsageError, match=f"^{leaf.name}: "):
                    cls.build(**base, **{leaf.name: (value,) if multiple else value})
            tried.append(leaf.name)
    assert {"lr", "weight_decay", "max_grad_norm", "max_minutes", "dropout", "warmup_ratio"} <= set(tried)


@pytest.mark.parametrize("value", [1e300, 1e-300, 0.5, 7 * 86400 + 1])
def test_dist_timeout_is_a_second_to_a_week(value):
    # issue 44: 1e300 s overflowed torch's timedelta under torchrun (a traceback), 1e-300 s timed out at once
    from bertstream.cli.errors import UsageError
    from bertstream.trainer.config import TrainConfig

    with pytest.raises(UsageError, match=r"^dist_timeout: must be in \[1, 604800\] seconds"):
        TrainConfig.build(paths=("d",), output="o", dist_timeout=value)
    assert TrainConfig.build(paths=("d",), output="o", dist_timeout=604800.0).run.dist_timeout == 604800.0


@pytest.mark.parametrize("value", ["inf", "nan"])
@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_lr_inf_is_refused_by_the_cli(world, command, value):
    argv = (
        pretrain(world)
        if command == "pretrain"
        else ["finetune", "--task", "classification", "--train-data", "a", "--eval-data", "b", "--init", "random:tiny"]
        + ["--output", str(world["root"] / "ft")]
    )
    one_error(CliRunner().invoke(main, [*argv, "--lr", value]), 2, "must be a finite number")


def test_a_diverging_run_stops_at_its_step_and_keeps_the_last_good_checkpoint(world, tmp_path):
    # --lr 1e30 with no warmup: the first step's update is huge, the second step's loss is NaN.
    out = tmp_path / "run"
    argv = pretrain(world, "--lr", "1e30", "--warmup-steps", "0", "--max-steps", "8", "--checkpoint-every", "1")
    argv[argv.index("--output") + 1] = str(out)
    line = one_error(CliRunner().invoke(main, [*argv, "--log-every", "1"]), 1, "training diverged at step 2")
    assert "nan" in line or "inf" in line
    assert [p.name for p in ckpt.list_checkpoints(out)] == ["step-0000001"]  # the last good one, nothing after
    from safetensors.torch import load_file

    weights = load_file(ckpt.step_dir(out, 1) / ckpt.MODEL_FILE)
    assert all(bool(torch.isfinite(v).all()) for v in weights.values())
    assert not list((out / ckpt.CHECKPOINTS).glob("*.tmp-*"))


def test_no_checkpoint_is_ever_written_with_nan_weights(tmp_path):
    weights = {"a": torch.zeros(3), "b": torch.tensor([1.0, float("nan")])}
    with pytest.raises(ckpt.CheckpointError, match="step 7: not saved, weights hold NaN or inf \\(b\\)"):
        ckpt.save(tmp_path, 7, model_state=weights, optimizer=None, rng={}, state={}, config={}, vocab_text="", keep=1)
    assert not (tmp_path / ckpt.CHECKPOINTS).exists() or not list((tmp_path / ckpt.CHECKPOINTS).iterdir())


def test_init_from_checks_the_vocabulary_by_content(world, tmp_path):
    from bertstream.trainer.hf.export import export_checkpoint

    hf = export_checkpoint(ckpt.step_dir(world["run"], 2), tmp_path / "hf")
    argv = pretrain(world, "--init-from", str(hf))
    argv[argv.index("--output") + 1] = str(tmp_path / "ok")
    assert CliRunner().invoke(main, argv).exit_code == 0  # its own vocabulary: trains
    tokens = (hf / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens[-1], tokens[-2] = tokens[-2], tokens[-1]  # the same size, two tokens swapped: other ids
    (hf / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    argv[argv.index("--output") + 1] = str(tmp_path / "swapped")
    one_error(CliRunner().invoke(main, argv), 1, "vocabulary mismatch")
    (hf / "vocab.txt").unlink()
    (hf / "tokenizer.json").unlink()  # export-hf writes one too, and a vocabulary is read from either
    argv[argv.index("--output") + 1] = str(tmp_path / "none")
    one_error(CliRunner().invoke(main, argv), 1, "has no usable vocab.txt")


# --- one line, always: failures a user meets without a bug ---------------------------------------------------


def run_argv(w: dict[str, Path], out: Path, *args: str) -> list[str]:
    argv = pretrain(w, *args)
    argv[argv.index("--output") + 1] = str(out)
    return argv


def test_a_full_disk_while_checkpointing_is_one_line_and_leaves_no_partial_checkpoint(world, tmp_path):
    # The file-size limit makes every write past 1 MB fail (EFBIG) as a full disk does (ENOSPC): config.json and
    # metrics fit, model.safetensors (~3 MB) does not.
    import resource

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with an error instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    out = tmp_path / "run"
    r = berttrain(*run_argv(world, out), preexec_fn=limit)
    clean_error(r, 1, f"checkpoint {ckpt.step_dir(out, 2)} could not be written", "the last checkpoint is kept")
    assert not list((out / ckpt.CHECKPOINTS).glob("*.tmp-*")) and not ckpt.list_checkpoints(out)


def test_a_full_disk_inside_torch_save_is_the_os_error_not_a_zip_writer_assertion(tmp_path):
    # Round 7: on a 3 MB tmpfs model.safetensors fitted and rng.pt did not: torch's zip writer turned the failed
    # write into "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598", a
    # 20-frame traceback. optimizer.pt and rng.pt are written through a file that keeps the OSError.
    import resource

    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, old[1]))
    try:
        with pytest.raises(
            ckpt.CheckpointError, match=r"could not be written: File too large .*last checkpoint is kept"
        ):
            ckpt.save(
                tmp_path,
                1,
                model_state={"w": torch.zeros(4)},
                optimizer=None,
                rng={"torch": torch.zeros(1 << 16, dtype=torch.uint8)},
                state={},
                config={},
                vocab_text="[PAD]\n",
                keep=1,
            )
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)
    assert not list((tmp_path / ckpt.CHECKPOINTS).iterdir())


def test_standard_output_that_cannot_be_written_is_one_line(tmp_path):
    # Round 7: `berttrain pretrain ... > /dev/full` trained and checkpointed, then ended in a 12-frame traceback
    # from the last line's click.echo (OSError: [Errno 28] No space left on device); `plot` here, the same echo.
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "loss": 1.0 / s, "mlm_loss": 1.0 / s, "mlm_accuracy": 0.1 * s}) + "\n"
            for s in (1, 2)
        )
    )
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [sys.executable, "-m", "bertstream.trainer", "plot", str(run)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert [line for line in p.stderr.splitlines() if line.startswith("Error:")] == [
        "Error: cannot write to standard output: No space left on device"
    ], p.stderr
    assert (run / "curves.png").is_file()  # the work was done; only its report was lost


def _run_entry_point(prelude: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``berttrain ARGS`` run as the script pyproject.toml declares (its entry point), after ``prelude``'s code."""
    import tomllib

    from tests.conftest import REPO

    entry = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["berttrain"]
    module, function = entry.split(":")
    program = (
        f"{prelude}import sys\nsys.argv = {['berttrain', *args]!r}\nfrom {module} import {function}\n{function}()\n"
    )
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)


def test_ctrl_c_while_the_command_line_imports_torch_is_one_line():
    # Round 7: SIGINT 3 s into `berttrain pretrain ...` landed in torch's import (the command line imports it
    # before parsing a flag): a KeyboardInterrupt traceback through torch/_native, exit 130. Here the Ctrl-C is
    # raised by an import hook when torch is imported, as the signal would be, without timing; the program is
    # the entry point pyproject.toml gives the berttrain script.
    p = _run_entry_point(
        "import sys\n"
        "class CtrlC:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, CtrlC())\n",
        ["pretrain", "--help"],
    )
    assert p.returncode == 130 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr == "Error: interrupted (Ctrl-C); nothing was written\n"


def test_ctrl_c_as_the_command_line_ends_is_no_traceback():
    # Round 8's rerun: Ctrl-C to `berttrain embed` as it ended ("embedded 3000 rows ... -> e.arrow" printed) landed
    # in torch's exit handler (torch/library.py, _del_library): 'Exception ignored in atexit callback' and a
    # KeyboardInterrupt traceback, exit 0. Here an exit handler sends the Ctrl-C, as the signal would land,
    # without timing; the program is the berttrain script's entry point.
    p = _run_entry_point(
        "import atexit, os, signal, time\n"
        "def ctrl_c():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.3)\n"  # Python runs its handler in here
        "    print('handler ended')\n"
        "atexit.register(ctrl_c)\n",
        ["plot", "--help"],
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.endswith("handler ended\n")  # the ending went on


def test_ctrl_c_in_clicks_ending_after_the_command_returned_is_taken_as_said():
    # Round 8's known gap: a Ctrl-C landing in click's code after the command had returned (the command line's
    # context closing) was click's "Aborted!", exit 1. Here the root context's close sends it, without timing.
    p = _run_entry_point(
        "import click, os, signal, time\n"
        "leave = click.Context.__exit__\n"
        "def leaving(ctx, *exc):\n"
        "    if ctx.parent is None and ctx._depth == 1 and not hasattr(ctx, 'sent'):\n"  # click's main leaving it
        "        ctx.sent = True\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.3)\n"  # Python runs its handler in here
        "        print('closed')\n"
        "    return leave(ctx, *exc)\n"
        "click.Context.__exit__ = leaving\n",
        ["plot", "--help"],
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.endswith("closed\n")


def test_an_interrupt_inside_a_checkpoint_write_stays_the_interrupt_and_leaves_no_checkpoint(tmp_path, monkeypatch):
    # Round 8's rerun: SIGTERM during the first checkpoint (signal.pretrain.SIGTERM.ckpt) landed in a write torch's
    # zip writer made; its context's exit wrote the end record again and raised "RuntimeError: [enforce fail at
    # inline_container.cc:672]", the interrupt lost, and its destructor wrote to the closed file later:
    # "terminate called after throwing an instance of 'pybind11::error_already_set'", SIGABRT (exit -6). Here the
    # file's third write raises the interrupt, as the signal handler would inside it, without timing.
    class Interrupted(io.FileIO):
        writes = 0

        def write(self, data):
            Interrupted.writes += 1
            if Interrupted.writes == 3:
                raise Terminated(signal.SIGTERM)
            return super().write(data)

    monkeypatch.setattr(ckpt, "open", lambda path, mode: Interrupted(path, "w"), raising=False)
    with pytest.raises(Terminated):
        ckpt.save(
            tmp_path,
            6,
            model_state={"w": torch.zeros(4)},
            optimizer={"state": {}, "big": torch.zeros(1 << 16)},
            rng={},
            state={},
            config={},
            vocab_text="[PAD]\n",
            keep=1,
        )
    assert not list((tmp_path / ckpt.CHECKPOINTS).iterdir())  # the partial folder removed
    keeper = ckpt._KeepsWriteError(Interrupted(tmp_path / "closed", "w"))
    keeper.file.close()
    assert keeper.write(b"end record") == 10  # the writer's destructor, after the file closed: no exception


def test_a_full_disk_while_writing_results_keeps_the_old_file_whole(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"old": 1}\n')
    with pytest.raises(OSError):
        ckpt.write_text_atomic(tmp_path / "missing" / "results.json", "{}")
    import resource

    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, old[1]))
    try:
        with pytest.raises(OSError):
            ckpt.write_text_atomic(path, "x" * 5000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)
    assert path.read_text() == '{"old": 1}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _wait_for(predicate, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _started(w: dict[str, Path], out: Path, *args: str, checkpoint_every: int = 5) -> subprocess.Popen:
    """A long pretraining run with two loader workers, once its first step is logged."""
    argv = run_argv(w, out, "--max-steps", "100000", "--log-every", "1", "--checkpoint-every", str(checkpoint_every))
    argv += args
    argv[argv.index("--num-workers") + 1] = "2"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.Popen(
        [sys.executable, "-m", "bertstream.trainer", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=ctrl_c_reaches_it,
    )
    _wait_for(lambda: (out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").stat().st_size > 0)
    return p


def test_a_killed_loader_worker_is_one_line(world, tmp_path):
    out = tmp_path / "run"
    p = _started(world, out)
    workers = _children(p.pid)
    assert workers, "no loader worker processes"
    os.kill(workers[0], signal.SIGKILL)  # as the kernel's OOM killer does
    stdout, stderr = p.communicate(timeout=120)
    clean_error(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr), 1, "data-loader worker")


@pytest.mark.parametrize(
    ("sig", "code", "name"),
    [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C"), (signal.SIGHUP, 129, "SIGHUP")],
)
def test_sigterm_behaves_as_ctrl_c(world, tmp_path, sig, code, name):
    # SIGHUP (the terminal closed) too, as bertprep takes it: its default killed the run on the spot, a checkpoint
    # being written left half-made (round 9: signal.pretrain.SIGHUP.ckpt, the rerun refused for want of one).
    out = tmp_path / "run"
    p = _started(world, out)
    _wait_for(lambda: bool(ckpt.list_checkpoints(out)))
    os.kill(p.pid, sig)  # `kill PID`, a scheduler's preemption: the main process only
    stdout, stderr = p.communicate(timeout=120)
    clean_error(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr), code, f"interrupted ({name})")
    assert not list((out / ckpt.CHECKPOINTS).glob("*.tmp-*"))  # no partial checkpoint left
    assert ckpt.latest(out) is not None  # the last complete one resumes


def test_an_interrupt_before_the_first_checkpoint_says_none_was_kept(world, tmp_path):
    out = tmp_path / "run"
    p = _started(world, out, checkpoint_every=100000)
    os.kill(p.pid, signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=120)
    clean_error(
        subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr), 143, "no checkpoint had been written"
    )
    assert "the last complete one is kept" not in stderr and ckpt.latest(out) is None
    # and it says what a rerun needs: the same command is refused in a folder holding the stopped run's files
    # (config.json, metrics.jsonl); it said "a rerun starts from step 0"
    rerun = CliRunner().invoke(main, run_argv(world, out, "--max-steps", "2"))
    assert rerun.exit_code == 2 and "pass --overwrite" in rerun.output
    assert "rerun with --overwrite" in stderr
    # export-hf of that run folder says so too (it said "checkpoint lacks model.safetensors")
    one_error(
        CliRunner().invoke(main, ["export-hf", str(out), str(tmp_path / "hf")]), 1, f"{out}: a run folder with no"
    )


def test_export_hf_of_a_truncated_model_file_is_one_line(world, tmp_path):
    broken = tmp_path / "ck"
    shutil.copytree(ckpt.step_dir(world["run"], 2), broken)
    model = broken / ckpt.MODEL_FILE
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    one_error(CliRunner().invoke(main, ["export-hf", str(broken), str(tmp_path / "hf")]), 1, f"{model}: cannot be read")


@pytest.mark.parametrize(
    ("block", "url", "package"),
    [("s3fs", "s3://bucket/ds", "s3fs"), ("aiohttp", "http://127.0.0.1:9/ds", "aiohttp")],
)
def test_a_url_without_its_optional_package_is_one_line_naming_it(world, tmp_path, block, url, package):
    argv = run_argv(world, tmp_path / "run")
    argv[argv.index("--data") + 1] = url
    clean_error(berttrain(*argv, block=block), 1, f"{url}: reading", f"pip install {package}")
    assert not (tmp_path / "run").exists()


def test_plot_without_matplotlib_is_one_line_naming_the_package(world):
    # matplotlib is a base dependency: missing only from a broken environment, installed by its own name
    clean_error(berttrain("plot", str(world["run"]), block="matplotlib"), 1, "matplotlib", "pip install matplotlib")


# --- unclear messages -----------------------------------------------------------------------------------------


def test_eval_data_equal_to_data_is_warned_once(world, tmp_path):
    result = CliRunner().invoke(main, run_argv(world, tmp_path / "run", "--eval-data", str(world["ds"]) + "/"))
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "is also --data" in line]
    assert len(warnings) == 1 and "training set" in warnings[0]


def test_a_folder_named_like_a_weight_is_said_at_start(world, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(world["ds"], tmp_path / "set:2")
    shutil.copytree(world["ds"], tmp_path / "set")
    argv = run_argv(world, tmp_path / "run")
    argv[argv.index("--data") + 1] = "set:2"
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    assert "--data set:2 read as folder 'set' with weight 2; write set:2/ for a folder of that name" in result.stderr
    argv[argv.index("--data") + 1] = "set:2/"  # the folder itself: no weight read, nothing to say
    argv[argv.index("--output") + 1] = str(tmp_path / "run2")
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0 and "read as folder" not in result.stderr, result.output


def test_export_hf_accepts_a_run_folder_as_finetune_and_embed_do(world, tmp_path):
    result = CliRunner().invoke(main, ["export-hf", str(world["run"]), str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    newest = CliRunner().invoke(main, ["export-hf", str(ckpt.step_dir(world["run"], 2)), str(tmp_path / "hf2")])
    assert newest.exit_code == 0, newest.output  # the run folder stands for its newest checkpoint
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() == (tmp_path / "hf2" / "model.safetensors").read_bytes()
    one_error(
        CliRunner().invoke(main, ["export-hf", str(world["run"]), str(ckpt.step_dir(world["run"], 2) / "hf")]),
        1,
        "output overlaps inputs",
    )


# --- secrets --------------------------------------------------------------------------------------------------


@pytest.fixture()
def http_dataset(world):
    """The dataset served over HTTP on 127.0.0.1 (the standard library's server; any credentials accepted)."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(world["root"])))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://alice:s3cr3t@127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_password_in_a_url_is_redacted_everywhere_berttrain_writes_or_shows(world, http_dataset, tmp_path):
    out = tmp_path / "run"
    argv = run_argv(world, out, "--eval-data", f"{http_dataset}/ds", "--log-every", "1")
    argv[argv.index("--data") + 1] = f"{http_dataset}/ds"
    argv[argv.index("--num-workers") + 1] = "2"
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    assert "s3cr3t" not in result.output
    written = [p for p in out.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".txt")]
    assert {"config.json", "metrics.jsonl", "state.json"} <= {p.name for p in written}
    leaks = [p for p in written if "s3cr3t" in p.read_text(encoding="utf-8", errors="replace")]
    assert not leaks, leaks
    assert "alice:<redacted>@" in (out / "config.json").read_text()  # the user stays: which account it was
    # ... and in an Error line: a missing folder behind the same credentials
    argv[argv.index("--data") + 1] = f"{http_dataset}/nope"
    argv[argv.index("--output") + 1] = str(tmp_path / "run2")
    line = one_error(CliRunner().invoke(main, argv), 1, "alice:<redacted>@")
    assert "s3cr3t" not in line


def test_redaction_is_by_value():
    from bertstream.schemas.redact import redact, redact_values

    assert (
        redact("read https://u:p@h/x and s3://k:sec@b/y") == "read https://u:<redacted>@h/x and s3://k:<redacted>@b/y"
    )
    assert redact("http://user@host/x, /a:b@c") == "http://user@host/x, /a:b@c"  # no password: nothing hidden
    assert redact_values({"http://u:p@h": ["ftp://a:b@c"]}) == {"http://u:<redacted>@h": ["ftp://a:<redacted>@c"]}


def test_a_pre_ln_run_exports_as_roberta_prelayernorm_and_a_mismatched_start_is_refused(world, tmp_path):
    out = tmp_path / "pre"
    result = CliRunner().invoke(main, run_argv(world, out, "--norm-placement", "pre"))
    assert result.exit_code == 0, result.output
    last = ckpt.step_dir(out, 2)
    assert json.loads((last / "config.json").read_text())["model"]["norm_placement"] == "pre"
    result = CliRunner().invoke(main, ["export-hf", str(last), str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "roberta-prelayernorm"
    hf = ckpt.step_dir(world["run"], 2)  # a post-LN run: pre-LN on top of it is refused, not silently rewired
    from bertstream.trainer.hf.export import export_checkpoint

    exported = export_checkpoint(hf, tmp_path / "hf_post")
    argv = run_argv(world, tmp_path / "mixed", "--init-from", str(exported), "--norm-placement", "pre")
    one_error(CliRunner().invoke(main, argv), 2, "is a post-LN model: drop --norm-placement")
