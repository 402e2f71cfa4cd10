"""Config dataclasses as the one source of the CLI flags (``bertstream.cli.options``): every default shown by
``--help`` is the dataclass's, a field added to a section becomes a flag, and a checkpoint saved with the
flat config layout of earlier versions still resumes."""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.cli.options import opt, section
from bertstream.trainer import checkpoint as ckpt
from bertstream.trainer.cli import main
from bertstream.trainer.config import OptimConfig, TrainConfig
from bertstream.trainer.data.config import DataConfig
from bertstream.trainer.embed import EmbedConfig
from bertstream.trainer.errors import RunError
from bertstream.trainer.finetune.config import FinetuneConfig
from bertstream.trainer.pretrain.resume import check_resume

COMMANDS = {"pretrain": TrainConfig, "finetune": FinetuneConfig, "embed": EmbedConfig}


def shown_defaults(command: str) -> dict[str, str]:
    """``--flag -> text of [default: ...]`` from the command's ``--help`` (wide, so nothing wraps)."""
    text = CliRunner().invoke(main, [command, "--help"], terminal_width=1000).output
    options_text = text.split("Options:\n")[1]
    blocks = re.split(r"\n(?=  -)", options_text)  # one block per option, its wrapped help included
    found = (re.search(r"^\s+(--[a-z-]+)\b.*\[default: ([^\]]+)\]", " ".join(b.split("\n")), re.S) for b in blocks)
    return dict(m.groups() for m in found if m)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_help_default_is_the_dataclass_default(command):
    cfg_class = COMMANDS[command]
    shown = shown_defaults(command)
    params = {p.name: p for p in main.commands[command].params}
    cli_leaves = [leaf for leaf in options.leaves(cfg_class) if leaf.meta["cli"]]
    for leaf in cli_leaves:
        param = params["no_" + leaf.name if leaf.meta["negate"] else leaf.name]
        if leaf.default is MISSING:
            assert param.required, leaf.flag
        elif isinstance(leaf.default, bool):
            assert param.is_flag and (leaf.flag not in shown or "/" in leaf.flag)  # --a/--no-a shows its default
        elif leaf.default is None:
            # None: decided at run time (embed's --max-seq-length says how, in its help)
            assert not param.required and (leaf.flag not in shown or "[default:" in leaf.help)
        else:
            assert param.default == leaf.default and shown[leaf.flag] == str(leaf.default), leaf.flag
    # every shown default belongs to a config field (none is written in the CLI)
    assert set(shown) <= {leaf.flag.split("/")[0] for leaf in cli_leaves}


def test_per_command_defaults_come_from_one_place():
    # the shared section's default, and fine-tuning's override of it given once in FinetuneConfig
    assert shown_defaults("pretrain")["--lr"] == str(OptimConfig().lr) == "0.0001"
    assert shown_defaults("finetune")["--lr"] == "5e-05"
    assert shown_defaults("pretrain")["--log-every"] == "10" and shown_defaults("finetune")["--log-every"] == "50"
    ft = FinetuneConfig.build(task="ner", train_data="t", eval_data="e", init="random:tiny", output="o")
    assert (ft.optim.lr, ft.run.log_every, ft.workers.num_workers) == (5e-5, 50, 0)
    pt = TrainConfig.build(paths=("d",), output="o")
    assert (pt.optim.lr, pt.run.log_every, pt.data.num_workers) == (1e-4, 10, 2)


@dataclass(frozen=True, slots=True, kw_only=True)
class MoreOptim(OptimConfig):
    beta2: float = opt(0.999, "Adam's second-moment decay.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Cfg:
    name: str = opt(help="Required.")
    optim: MoreOptim = section(MoreOptim, lr=0.5)


def test_a_field_added_to_a_section_becomes_a_flag():
    seen = []

    @click.command()
    @options.click_options(Cfg)
    def cmd(**values):
        seen.append(options.build(Cfg, **values))

    assert "--beta2 FLOAT" in CliRunner().invoke(cmd, ["--help"]).output
    result = CliRunner().invoke(cmd, ["--name", "x", "--beta2", "0.98"])
    assert result.exit_code == 0, result.output
    assert seen[0] == Cfg(name="x", optim=MoreOptim(lr=0.5, beta2=0.98))
    assert CliRunner().invoke(cmd, []).exit_code == 2  # --name is required


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    shape: str = opt("a", "A shape.", choices=("a", "b", "c"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Narrow:
    shaped: Shape = section(Shape, choices={"shape": ("a", "b")}, shape="b")

    def __post_init__(self) -> None:
        options.check_choices(self)


def test_a_section_may_offer_fewer_choices_than_its_field_and_a_saved_leaf_is_found_in_either_layout():
    # issue 55: one declaration of a setting two commands offer with other choices (embed's and finetune's
    # --pooling); the flag, a config built in code and a file's value are held to this config's
    @click.command()
    @options.click_options(Narrow)
    def cmd(**values):
        pass

    assert "[a|b]" in CliRunner().invoke(cmd, ["--help"]).output
    assert CliRunner().invoke(cmd, ["--shape", "c"]).exit_code == 2
    assert options.build(Narrow) == Narrow(shaped=Shape(shape="b"))
    with pytest.raises(UsageError, match=r"must be one of \('a', 'b'\), got 'c'"):
        options.build(Narrow, shape="c")
    with pytest.raises(AssertionError, match="beyond Shape's own"):
        section(Shape, choices={"shape": ("d",)})
    assert options.saved_leaf({"shape": "a"}, "shape") == "a" == options.saved_leaf({"shaped": {"shape": "a"}}, "shape")
    assert options.saved_leaf({"other": 1}, "shape", "b") == "b"


def test_the_cli_builds_the_nested_config(monkeypatch, tmp_path):
    got = []
    monkeypatch.setattr(
        "bertstream.trainer.pretrain.loop.pretrain", lambda cfg: got.append(cfg) or {"step": 0, "run_dir": "r"}
    )
    argv = ["pretrain", "--data", "a:1", "--data", "b:3", "--output", str(tmp_path), "--lr", "0.002"]
    argv += ["--format", "arrow", "--no-tensorboard", "--model", "mini", "--keep-checkpoints", "5", "--compile"]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    cfg = got[0]
    assert cfg.data.paths == ("a", "b") and cfg.data.weights == (1.0, 3.0)
    assert (cfg.optim.lr, cfg.data.format, cfg.run.tensorboard, cfg.model.preset) == (
        0.002,
        "arrow",
        False,
        "mini",
    )
    assert (cfg.checkpoint.keep_checkpoints, cfg.compile, cfg.optim.warmup_steps) == (5, True, 1000)
    bad = CliRunner().invoke(main, ["pretrain", "--data", "a", "--output", "o", "--weight-decay", "2"])
    assert bad.exit_code == 2 and "Invalid value for '--weight-decay': must be in [0, 1), got 2.0" in bad.output
    with pytest.raises(TypeError, match="no setting learning_rate"):
        TrainConfig.build(paths=("a",), output="o", learning_rate=1.0)


# TrainConfig.to_dict() as versions before sections saved it in every checkpoint's config.json "train"
# (the last of them; earlier ones lack OBJECTIVE).
FLAT_TRAIN = {
    "data": ["DATA"], "output": "OUT", "eval_data": None, "data_format": "auto", "model": "tiny",
    "model_config": None, "init_from": None, "dropout": None, "batch_size": 4, "grad_accum": 1, "lr": 0.001,
    "warmup_steps": 1, "max_steps": 2, "max_minutes": 0.0, "optimizer": "adamw", "weight_decay": 0.01,
    "adam_eps": 1e-06, "max_grad_norm": 1.0, "precision": "auto", "compile": False, "seed": 0, "log_every": 1,
    "eval_every": 500, "eval_batches": 50, "checkpoint_every": 2, "keep_checkpoints": 3, "resume": "auto",
    "overwrite": False, "reset_optimizer": False, "num_workers": 0, "shuffle_buffer": 10000,
    "skip_corrupt": False, "deterministic": False, "tensorboard": False, "device": "auto",
    "masking": "static", "mlm_probability": 0.15, "max_predictions": None, "whole_word_mask": False, "no_nsp": False,
}  # fmt: skip
OBJECTIVE = ("masking", "mlm_probability", "max_predictions", "whole_word_mask", "no_nsp")  # not saved before them


def test_a_flat_saved_config_reads_as_the_nested_one():
    cfg = TrainConfig.build(**options.saved_values(TrainConfig, FLAT_TRAIN))
    assert (cfg.data.paths, cfg.model.preset, cfg.optim.lr, cfg.checkpoint.checkpoint_every) == (
        ("DATA",),
        "tiny",
        1e-3,
        2,
    )
    assert (cfg.run_folder.output, cfg.data.num_workers, cfg.run.tensorboard, cfg.batch.batch_size) == (
        "OUT",
        0,
        False,
        4,
    )
    # every setting the flat config saved reads back as saved; those added since (a run saved before them lacks
    # them: the loader's own settings, --lr-schedule, --threads, ...) read as their defaults. Derived from the
    # config, not listed: a new setting needs no edit here.
    now, flat = options.saved_values(TrainConfig, cfg.to_dict()), options.saved_values(TrainConfig, FLAT_TRAIN)
    assert {k: now[k] for k in flat} == flat
    defaults = options.saved_values(TrainConfig, TrainConfig.build(paths=("DATA",), output="OUT").to_dict())
    later = now.keys() - flat.keys()
    assert len(later) >= 15 and {k: now[k] for k in later} == {k: defaults[k] for k in later}
    assert now["norm_placement"] is None  # not given: the preset's post-LN, or --init-from's own placement
    check_resume(cfg, {"train": FLAT_TRAIN}, Path("ck"), 1)
    check_resume(cfg, {"train": {k: v for k, v in FLAT_TRAIN.items() if k not in OBJECTIVE}}, Path("ck"), 1)
    changed = TrainConfig.build(**{**options.flat(cfg), "lr": 0.002, "preset": "mini"})
    with pytest.raises(RunError, match=r"--model mini \(the run has tiny\); --lr 0.002 \(the run has 0.001\)"):
        check_resume(changed, {"train": FLAT_TRAIN}, Path("ck"), 1)


def test_dist_timeout_is_declared_once_for_both_commands_and_read_where_either_layout_saved_it():
    # one field of the run section (both commands' --dist-timeout, listed in --help where it was); a config saved
    # while each command declared its own kept it beside the sections
    fine = {"task": "classification", "train_data": "t", "eval_data": "e", "init": "random:tiny", "output": "o"}
    for cls, given in ((TrainConfig, {"paths": ("d",), "output": "o"}), (FinetuneConfig, fine)):
        saved = cls.build(**given, dist_timeout=42.0).to_dict()
        assert saved["run"]["dist_timeout"] == 42.0 and "dist_timeout" not in saved
        earlier = {**saved, "run": {k: v for k, v in saved["run"].items() if k != "dist_timeout"}, "dist_timeout": 7.0}
        assert cls.build(**options.saved_values(cls, earlier)).run.dist_timeout == 7.0
    assert [leaf.name for leaf in options.leaves(TrainConfig)].count("dist_timeout") == 1


def test_a_config_saved_with_the_earlier_data_section_reads_as_today():
    # config.json "train" as saved while the data section was its own class (sources, eval_data, data_format)
    saved = TrainConfig.build(paths=("a", "b"), output="OUT", batch_size=8, seed=3, masking="dynamic").to_dict()
    assert "batch_size" not in saved["data"] and "seed" not in saved["data"]  # saved once, where their flag is
    earlier = {k: v for k, v in saved.items() if k not in ("eval_set", "batch")} | {"batch_size": 8}
    earlier["data"] = {"sources": ["a:1", "b:3"], "eval_data": "ev", "data_format": "arrow", "num_workers": 1}
    earlier["data"] |= {"shuffle_buffer": 10, "skip_corrupt": True}
    earlier["objective"] = {"masking": "dynamic", "no_nsp": False}  # where the masking flags were saved then
    cfg = TrainConfig.build(**options.saved_values(TrainConfig, earlier))
    assert (cfg.data.paths, cfg.data.weights, cfg.eval_set.eval_data, cfg.data.format) == (
        ("a", "b"),
        (1.0, 3.0),
        "ev",
        "arrow",
    )
    assert (cfg.data.num_workers, cfg.data.shuffle_buffer, cfg.data.skip_corrupt) == (1, 10, True)
    assert (cfg.data.batch_size, cfg.data.seed, cfg.data.masking) == (8, 3, "dynamic")  # the run's, linked


def test_the_data_section_is_the_loaders_config_with_the_runs_settings():
    cfg = TrainConfig.build(paths=("a",), output="o", batch_size=16, seed=5, masking="dynamic", mlm_probability=0.2)
    assert isinstance(cfg.data, DataConfig)
    assert (cfg.data.batch_size, cfg.data.seed, cfg.data.masking, cfg.data.mlm_probability) == (16, 5, "dynamic", 0.2)
    assert "--batch-size" in {leaf.flag for leaf in options.leaves(TrainConfig)}
    assert [leaf.section for leaf in options.leaves(TrainConfig) if leaf.name == "batch_size"] == ["batch"]  # one leaf
    with pytest.raises(UsageError, match="batch_size: data.batch_size is 4 but the config's batch_size is 16"):
        replace(cfg, data=replace(cfg.data, batch_size=4))


def test_a_checkpoint_with_a_flat_config_json_resumes(tmp_path):
    from tests.trainer.test_run_safety import run, small_dataset

    data = small_dataset(tmp_path / "ds", n=32)
    out = tmp_path / "run"
    run(data, out, max_steps=2)
    config_file = ckpt.step_dir(out, 2) / "config.json"
    saved = json.loads(config_file.read_text())
    assert set(saved["train"]) == {f.name for f in fields(TrainConfig) if f.name != "given"}  # the nested layout
    saved["train"] = {**FLAT_TRAIN, "data": [str(data)], "output": str(out)}
    config_file.write_text(json.dumps(saved))
    with pytest.raises(RunError, match=r"--weight-decay 0.1 \(the run has 0.01\)"):
        run(data, out, max_steps=4, weight_decay=0.1)
    rows = run(data, out, max_steps=4)
    assert [r["step"] for r in rows][-2:] == [3, 4]


def test_one_error_type_names_the_field():
    with pytest.raises(UsageError, match="warmup_ratio: must be in"):
        FinetuneConfig.build(task="ner", train_data="t", eval_data="e", init="i", output="o", warmup_ratio=1.0)
    with pytest.raises(UsageError, match="keep_checkpoints: must be >= 1, got 0"):
        TrainConfig.build(paths=("d",), output="o", keep_checkpoints=0)


def test_a_setting_says_what_it_is_and_the_lists_are_read_from_that():
    # a setting tagged where it is declared joins each list that code used to keep by hand
    @dataclass(frozen=True, kw_only=True, slots=True)
    class Tagged:
        kept: int = opt(1, tags=(options.FIXED,))
        shape: str = opt("a", tags=(options.FIXED, options.ARCH))
        free: int = opt(0)
        rows: float = opt(0.5, tags=(options.RECORDED,))
        extra: str = opt("", tags=(options.RECORDED_WHEN_SET,))
        mode: str = opt("x")
        knob: int = opt(3, tags=(options.RECORDED,), only_with=("mode", "y"))

    assert options.tagged(Tagged, options.FIXED) == ("kept", "shape")
    assert options.tagged(Tagged, options.ARCH) == ("shape",)
    assert options.recorded(Tagged()) == {"rows": 0.5}  # extra at its default, knob without mode y
    assert options.recorded(Tagged(extra="e", mode="y")) == {"rows": 0.5, "extra": "e", "knob": 3}
    with pytest.raises(UsageError, match="knob: only applies with --mode y \\(this run has --mode x\\)"):
        options.check_only_with(Tagged(knob=4))
    with pytest.raises(AssertionError, match="unknown tags"):
        opt(1, tags=("fixed on Tuesdays",))


def test_the_command_line_records_what_it_was_given(monkeypatch, tmp_path):
    got = []
    monkeypatch.setattr(
        "bertstream.trainer.pretrain.loop.pretrain", lambda cfg: got.append(cfg) or {"step": 0, "run_dir": "r"}
    )
    argv = ["pretrain", "--data", "a", "--output", str(tmp_path), "--model", "tiny", "--no-tensorboard", "--lr", "1"]
    assert CliRunner().invoke(main, argv).exit_code == 0
    assert got[0].given == {"paths", "output", "preset", "tensorboard", "lr"}  # --model tiny is its default, given
    saved = tmp_path / "config.json"
    saved.write_text(json.dumps({"train": {**got[0].to_dict(), "seed": 3}}))
    assert CliRunner().invoke(main, ["pretrain", "--config", str(saved)]).exit_code == 0
    assert got[1].given == {"paths", "output", "tensorboard", "lr", "seed"}  # from the file: what is not a default
    assert TrainConfig.build(paths=("a",), output="o").given is None  # built in code: no record


@dataclass(frozen=True, kw_only=True, slots=True)
class _Demo:
    """The bertprep kinds of field: a repeatable required flag, an on/off pair that may be unset, a negated
    flag, a choice whose default is "none chosen", a text flag converted, a flag listed after another."""

    inputs: tuple[str, ...] = opt(help="Inputs.", flag="--input")
    fmt: str = opt("a", flag="--format", choices=("a", "b"), show=True)
    casing: bool | None = opt(None, "Casing.", flag="--lowercase/--cased")
    header: bool = opt(True, flag="--header/--no-header", show=True)
    strip: bool = opt(True, "Keep it.", flag="--keep", negate=True)
    segmenter: str = opt("", choices=("x", "y"))
    pair: tuple[int, int] | None = opt(None, convert=lambda t: None if t is None else _pair(t))
    out: str = opt(help="Out.", after="inputs")


def _pair(text: str) -> tuple[int, int]:
    a, _, b = text.partition(":")
    if not (a.isdigit() and b.isdigit()):
        raise UsageError("pair", f"must be A:B, got {text!r}")
    return int(a), int(b)


def _demo_command():
    got = {}

    @click.command()
    @options.click_options(_Demo)
    def command(**values):
        got["job"] = options.build(_Demo, **values)

    return command, got


def test_bertprep_kinds_of_flag_parse_to_the_dataclass():
    command, got = _demo_command()
    result = CliRunner().invoke(command, ["--input", "p", "--input", "q", "--out", "o"])
    assert result.exit_code == 0, result.output
    assert got["job"] == _Demo(inputs=("p", "q"), out="o")  # unset pair: None; no segmenter chosen: ""
    args = ["--input", "p", "--out", "o", "--cased", "--no-header", "--keep", "--segmenter", "y", "--pair", "1:2"]
    assert CliRunner().invoke(command, args).exit_code == 0
    assert got["job"] == _Demo(
        inputs=("p",), out="o", casing=False, header=False, strip=False, segmenter="y", pair=(1, 2)
    )
    bad = CliRunner().invoke(command, ["--input", "p", "--out", "o", "--pair", "1-2"])
    assert bad.exit_code == 2 and "Invalid value for '--pair': must be A:B, got '1-2'" in bad.output


def test_help_order_and_shown_defaults_are_per_field():
    command, _ = _demo_command()
    text = CliRunner().invoke(command, ["--help"], terminal_width=1000).output
    flags = re.findall(r"^  (--[a-z-]+)", text, re.M)
    assert flags == [
        "--input",
        "--out",
        "--format",
        "--lowercase",
        "--header",
        "--keep",
        "--segmenter",
        "--pair",
        "--help",
    ]
    assert "[default: a]" in text and "[default: header]" in text and text.count("[default:") == 2


def test_a_config_error_names_the_flag_typed():
    assert options.flag_for(_Demo, "fmt") == "--format"
    assert options.flag_for(_Demo, "header") == "--no-header"  # the one away from the default
    assert options.flag_for(_Demo, "strip") == "--keep"
    assert options.flag_for(_Demo, "not_a_field") == "--not-a-field"


def test_bertprep_jobs_build_from_flags_and_keep_the_keyword_forms():
    from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
    from bertstream.pipelines.tasks.classification import ClassificationJob

    job = options.build(PretrainingJob, inputs=["a"], vocab="v", output="o", no_strip_gutenberg=True)
    # the command line judges the layout (--format auto); the library default stays a format of its own
    assert job.config == PretrainingConfig(input_format="auto", strip_gutenberg=False)
    assert job.casing is None and job.inputs == ("a",)
    job = options.build(ClassificationJob, inputs=["a"], vocab="v", output="o", glue="sst2", labels=["x"])
    assert job.io.inputs == ("a",) and job.label_source.labels == ("x",) and job.max_seq_length == 128


@pytest.mark.parametrize("alias", [False, True], ids=["flag", "alias"])
def test_both_command_lines_name_the_masking_settings_alike(alias):
    """One flag per masking setting in bertprep and berttrain (the manifest's names); the trainer's earlier
    names are aliases in both, and an error names the flag and its alias as click's own errors do."""
    from bertstream.pipelines.cli import main as bertprep

    argv = []
    for flag, value in (("--masked-lm-prob", "0.3"), ("--max-predictions-per-seq", "7")):
        argv += [options.ALIASES[flag][0] if alias else flag, value]
    prep = bertprep.commands["pretraining"].make_context(
        "pretraining", ["--input", "a", "--vocab", "v", "--output", "o"] + argv
    )
    assert (prep.params["masked_lm_prob"], prep.params["max_predictions_per_seq"]) == (0.3, 7)
    train = main.commands["pretrain"].make_context("pretrain", ["--data", "a", "--output", "o"] + argv)
    assert (train.params["mlm_probability"], train.params["max_predictions"]) == (0.3, 7)
    bad = CliRunner().invoke(main, ["pretrain", "--data", "a", "--output", "o", "--masking", "dynamic", argv[0], "1.5"])
    assert bad.exit_code == 2 and "'--masked-lm-prob' / '--mlm-probability': must be in (0, 1)" in bad.output


def test_every_integer_setting_of_every_command_fits_in_64_bits():
    # issue 44: `bertprep vocab --min-frequency 100000000000000000000` ended in the tokenizers library's
    # OverflowError; every int flag of both command lines goes through options.build, which refuses it by name.
    from bertstream.pipelines.extract_config import ExtractJob
    from bertstream.pipelines.pretraining.config import PretrainingJob
    from bertstream.pipelines.tasks.kinds import KINDS
    from bertstream.pipelines.vocab_config import VocabJob

    classes = [VocabJob, ExtractJob, PretrainingJob, *(k.job for k in KINDS), TrainConfig, FinetuneConfig, EmbedConfig]
    tried = set()
    for cls in classes:
        for leaf in options.leaves(cls):
            if options._base_type(leaf.type)[0] is not int:
                continue
            for value, bound in ((10**20, "at most 2\\*\\*63 - 1"), (-(10**20), "at least -2\\*\\*63")):
                multiple = options._base_type(leaf.type)[1]
                with pytest.raises(UsageError, match=f"^{leaf.name}: must be {bound}, got {value}"):
                    options.build(cls, **{leaf.name: (value,) if multiple else value})
            tried.add(leaf.name)
    assert {"min_frequency", "vocab_size", "num_shards", "max_seq_length", "seed", "batch_size"} <= tried


@pytest.mark.parametrize(
    "args",
    [
        ["--out", "o", "--out", "p"],  # a path: last-wins wrote where the user did not look
        ["--out", "o", "--format", "a", "--format", "b"],  # a choice
        ["--out", "o", "--pair", "1:2", "--pair", "3:4"],  # a converted value
        ["--out", "o", "--lowercase", "--cased"],  # both sides of an on/off pair
    ],
    ids=["path", "choice", "converted", "pair"],
)
def test_a_single_valued_flag_given_twice_is_refused(args):
    command, got = _demo_command()
    result = CliRunner().invoke(command, ["--input", "p", *args])
    assert result.exit_code == 2 and "give" in result.output and "job" not in got, result.output
    flag = args[-2] if args[-2] != "--lowercase" else "--lowercase and --cased"
    assert flag in result.output.splitlines()[-1]


def test_a_flag_repeated_with_one_value_is_that_value_and_multiple_flags_collect():
    command, got = _demo_command()
    args = ["--input", "p", "--input", "q", "--out", "o", "--out", "o", "--cased", "--cased", "--keep", "--keep"]
    assert CliRunner().invoke(command, args).exit_code == 0
    assert got["job"] == _Demo(inputs=("p", "q"), out="o", casing=False, strip=False)


@pytest.mark.parametrize(
    ("program", "args", "flag"),
    [
        ("bertprep", ["pretraining", "--input", "x", "--vocab", "v", "--output", "a", "--output", "b"], "--output"),
        ("bertprep", ["report", "d", "--output", "a", "--output", "b"], "--output"),
        (
            "bertprep",
            [
                "task",
                "classification",
                "--input",
                "x",
                "--vocab",
                "v",
                "--output",
                "o",
                "--max-seq-length",
                "64",
                "--max-seq-length",
                "32",
            ],
            "--max-seq-length",
        ),
        ("berttrain", ["pretrain", "--data", "d", "--seed", "1", "--seed", "2"], "--seed"),
        # round 8: plot's own flags kept the last (`plot RUN --output a.png --output b.png` wrote b.png)
        ("berttrain", ["plot", ".", "--output", "a.png", "--output", "b.png"], "--output"),
        ("berttrain", ["plot", ".", "--baseline-from", "d1", "--baseline-from", "d2"], "--baseline-from"),
    ],
)
def test_both_command_lines_refuse_a_flag_given_twice(program, args, flag):
    from bertstream.pipelines.cli import main as bertprep

    result = CliRunner().invoke(bertprep if program == "bertprep" else main, args)
    assert result.exit_code == 2, result.output
    assert f"Error: {flag} is given 2 times" in result.output


@dataclass(frozen=True, slots=True, kw_only=True)
class Way:
    mode: str = opt("any", "A word, or one of a command's choices.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Picked:
    mode: str = opt("a", "One of its own.", choices=("a", "b"))


@dataclass(frozen=True, slots=True, kw_only=True)
class FreeWay:
    way: Way = section(Way, choices={"mode": ("a", "b")}, mode="a")


def test_a_section_may_give_choices_to_a_field_that_takes_any_value():
    """One declaration, another command's choices (``finetune --resume`` takes auto or none, ``pretrain``'s a
    folder too): the flag of that command offers those, the section's own declaration stays free."""

    @click.command()
    @options.click_options(FreeWay)
    def cmd(**values):
        pass

    assert "--mode [a|b]" in CliRunner().invoke(cmd, ["--help"]).output
    refused = CliRunner().invoke(cmd, ["--mode", "c"])
    assert refused.exit_code == 2 and "'c' is not one of 'a', 'b'" in refused.output
    assert [leaf.choices for leaf in options.leaves(FreeWay)] == [("a", "b")]
    assert options.build(FreeWay) == FreeWay(way=Way(mode="a")) and Way().mode == "any"
    with pytest.raises(AssertionError, match="Way has no field kind"):
        section(Way, choices={"kind": ("x",)})
    with pytest.raises(AssertionError, match="beyond Picked's own"):  # a field with choices is offered fewer only
        section(Picked, choices={"mode": ("a", "z")})
