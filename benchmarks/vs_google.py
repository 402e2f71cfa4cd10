"""`bertprep pretraining` against Google's `create_pretraining_data.py`, side by side in one run on the same text.

Both read one file in Google's input layout (one "sentence" a line, a blank line between documents): the six
shared Gutenberg books, each book a document and each non-blank line of it a line (``--format sentences`` for
bertprep, so both read exactly the same lines), with the same vocabulary (a 30,522-token WordPiece vocabulary
trained on the books by ``bertprep vocab`` first, not timed, or ``--vocab``), length 128, 20 predictions per
sequence, masked LM probability 0.15. For each dupe factor (1 and 5 by default) it runs bertprep, then Google's
script, each as a whole command (interpreter start, imports and writing included: what a user waits for), and
prints both wall times, their CPU seconds (user+system) and the ratio, with each side's instance count.
It also runs both on a 300-line file first and prints those times: each side's fixed start-up.

Google's script is not in this repository: it comes from PyPI's ``bert-tensorflow`` package
(``bert/create_pretraining_data.py``, Apache-2.0), which needs TensorFlow, in a virtual environment of its own
outside the checkout (``--google-venv``, default ``$BERTSTREAM_GOOGLE_VENV`` or
``~/.cache/bertstream/google-bert-venv``; ``--setup`` creates it: about 600 MB). It was written for TensorFlow 1;
on TensorFlow 2 it runs unchanged behind a three-line shim that makes ``import tensorflow`` give
``tensorflow.compat.v1`` (the approach of google-research/bert issue 1159), so ``tf.flags``, ``tf.gfile``,
``tf.python_io`` and ``tf.app`` are TF1's.

    python benchmarks/vs_google.py --setup                # once: the TensorFlow venv (PyPI)
    python benchmarks/vs_google.py                        # dupe 1 and 5 on the Gutenberg books
    python benchmarks/vs_google.py --dupe 1 --vocab vocab.txt --json out.json

Nothing is written inside the repository: the input, vocabulary and outputs go to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.pipeline_throughput import run_measured  # noqa: E402

BOOKS = REPO.parent / "shared" / "data" / "pretrain" / "gutenberg"
DEFAULT_VENV = Path(
    os.environ.get("BERTSTREAM_GOOGLE_VENV", Path.home() / ".cache" / "bertstream" / "google-bert-venv")
)
PACKAGES = ("tensorflow-cpu", "bert-tensorflow==1.0.4")
# TF1's API under TF2: the script's `import tensorflow as tf` gets tf.compat.v1 (flags, gfile, python_io, app).
SHIM = (
    "import sys; import tensorflow.compat.v1 as tf; sys.modules['tensorflow'] = tf; "
    "from bert import create_pretraining_data as c; tf.app.run(c.main, argv=sys.argv)"
)
STARTUP_LINES = 300
# bertprep on the 300-line file in one process, each phase of its fixed start-up timed (printed as JSON).
PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
from bertstream.pipelines.cli import main
t1 = time.perf_counter()
import apache_beam
t2 = time.perf_counter()
import numba
t3 = time.perf_counter()
from bertstream.pipelines.runners import dataset_run as D
from bertstream.pipelines.pretraining import pipeline as P
t4 = time.perf_counter()
spent = {}
def timed(name, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] = time.perf_counter() - start
    return wrapper
P.build_pipeline = timed("build", P.build_pipeline)
D.run_pipeline = timed("run", D.run_pipeline)
main(args=sys.argv[1:], standalone_mode=False)
t5 = time.perf_counter()
print(json.dumps({
    "import bertprep's command line": t1 - t0,
    "import Beam": t2 - t1,
    "import numba": t3 - t2,
    "import the pipeline's stages": t4 - t3,
    "build the Beam pipeline (stages, DoFns)": spent["build"],
    "run it (the runner's stages and bundles, 300 lines)": spent["run"],
    "the rest (vocabulary, inputs, output folder, manifest)": t5 - t4 - spent["build"] - spent["run"],
    "in the process": t5 - t0,
}), flush=True)
from bertstream.cli.process import exit_now  # as the bertprep command ends
exit_now(0)
"""


def setup_command(venv: Path) -> str:
    return f"python3 -m venv {venv} && {venv}/bin/pip install {' '.join(PACKAGES)}"


def google_python(venv: Path, setup: bool) -> Path:
    """The venv's interpreter, created first with ``setup``; otherwise a missing one ends the run saying how."""
    python = venv / "bin" / "python"
    if setup and not python.exists():
        subprocess.run(setup_command(venv), shell=True, check=True)
    probe = [str(python), "-c", "import tensorflow, bert.create_pretraining_data"] if python.exists() else None
    if probe is None or subprocess.run(probe, capture_output=True).returncode:
        raise SystemExit(
            f"Google's create_pretraining_data.py needs a Python with TensorFlow and bert-tensorflow at {venv}\n"
            f"(none there). Create it with --setup, or by hand:\n  {setup_command(venv)}\n"
            f"or point --google-venv (or BERTSTREAM_GOOGLE_VENV) at another one."
        )
    return python


def google_layout(books: list[Path], out: Path, max_lines: int | None = None) -> Path:
    """The books in Google's layout: each book a document (a blank line between books), its non-blank lines
    as they are (hard-wrapped lines for sentences)."""
    docs = []
    for book in books:
        text = book.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
        docs.append("\n".join(line for line in text.split("\n") if line.strip()))
    lines = "\n\n".join(docs).split("\n")[:max_lines]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def measured(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds (user+system of the command and everything it waited for), peak RSS, output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds, peak, out = run_measured(cmd, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, peak, out


def ours_args(text: Path, vocab: str, out: Path, dupe: int) -> list[str]:
    return [
        "pretraining",
        "--input",
        f"sentences:{text}",
        "--vocab",
        vocab,
        "--output",
        str(out),
        "--max-seq-length",
        "128",
        "--max-predictions-per-seq",
        "20",
        "--masked-lm-prob",
        "0.15",
        "--dupe-factor",
        str(dupe),
        "--overwrite",
    ]


def run_ours(text: Path, vocab: str, out: Path, dupe: int, env: dict[str, str]) -> dict:
    main = "import sys; from bertstream.pipelines.cli import main; sys.argv[0] = 'bertprep'; main()"
    seconds, cpu, peak, _ = measured([sys.executable, "-c", main, *ours_args(text, vocab, out, dupe)], env)
    instances = json.loads((out / "manifest.json").read_text())["totals"]["instances"]
    shutil.rmtree(out)
    return {"side": "bertprep", "seconds": seconds, "cpu_s": cpu, "peak_mb": peak / 1e6, "instances": instances}


def startup_phases(text: Path, vocab: str, out: Path, env: dict[str, str]) -> dict[str, float]:
    """Where bertprep's fixed start-up goes: one run on ``text`` with each phase timed, and the interpreter's
    own start and end (the command's wall time less the phases)."""
    seconds, _, _, log = measured([sys.executable, "-c", PHASES, *ours_args(text, vocab, out, 1)], env)
    shutil.rmtree(out)
    phases = json.loads([line for line in log.splitlines() if line.startswith("{")][-1])
    return {
        "start and end the interpreter (its teardown at exit)": seconds - phases.pop("in the process"),
        **phases,
        "whole command": seconds,
    }


def run_google(python: Path, text: Path, vocab: str, out: Path, dupe: int, env: dict[str, str]) -> dict:
    cmd = [
        str(python),
        "-c",
        SHIM,
        f"--input_file={text}",
        f"--output_file={out}",
        f"--vocab_file={vocab}",
        "--do_lower_case=True",
        "--max_seq_length=128",
        "--max_predictions_per_seq=20",
        "--masked_lm_prob=0.15",
        f"--dupe_factor={dupe}",
    ]
    seconds, cpu, peak, log = measured(cmd, {**env, "TF_CPP_MIN_LOG_LEVEL": "2"})
    found = re.findall(r"Wrote (\d+) total instances", log)
    if not found:
        raise SystemExit(f"Google's script printed no instance count:\n{log[-2000:]}")
    out.unlink()
    return {"side": "google", "seconds": seconds, "cpu_s": cpu, "peak_mb": peak / 1e6, "instances": int(found[-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dupe", type=int, action="append", help="dupe factors (default 1 and 5)")
    ap.add_argument("--vocab", help="vocab.txt; default: a 30,522-token vocab trained on the books (not timed)")
    ap.add_argument("--google-venv", type=Path, default=DEFAULT_VENV, help=f"default {DEFAULT_VENV}")
    ap.add_argument("--setup", action="store_true", help="create --google-venv from PyPI when it is absent")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    if not BOOKS.exists():
        raise SystemExit(f"needs the shared Gutenberg books at {BOOKS}")
    python = google_python(args.google_venv, args.setup)
    root = Path(tempfile.mkdtemp(prefix="bench_vs_google_"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    try:
        books = sorted(BOOKS.glob("*.txt"))
        text = google_layout(books, root / "books.txt")
        tiny = google_layout(books, root / "tiny.txt", STARTUP_LINES)
        vocab = args.vocab
        if vocab is None:
            from bertstream.pipelines.vocab import VocabConfig, train_vocab

            train_vocab([f"text:{b}" for b in books], root / "vocab", VocabConfig())
            vocab = str(root / "vocab" / "vocab.txt")
        mb = text.stat().st_size / 1e6
        # Untimed warm-up of both (numba's cache of this checkout, both interpreters' bytecode), then the start-ups.
        run_ours(tiny, vocab, root / "ours", 1, {**env, "BERTSTREAM_KERNELS": "always"})
        run_google(python, tiny, vocab, root / "google.tfrecord", 1, env)
        rows = [
            {"input": "300 lines", "dupe": 1, **run_ours(tiny, vocab, root / "ours", 1, env)},
            {"input": "300 lines", "dupe": 1, **run_google(python, tiny, vocab, root / "google.tfrecord", 1, env)},
        ]
        phases = startup_phases(tiny, vocab, root / "ours", env)
        for dupe in args.dupe or [1, 5]:
            rows.append({"input": "books", "dupe": dupe, **run_ours(text, vocab, root / "ours", dupe, env)})
            print(json.dumps(rows[-1]), flush=True)
            rows.append(
                {"input": "books", "dupe": dupe, **run_google(python, text, vocab, root / "g.tfrecord", dupe, env)}
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(rows, mb)
    print(f"\nbertprep's fixed start-up, phase by phase ({STARTUP_LINES} lines, one run):")
    for name, seconds in phases.items():
        print(f"  {name:<56} {seconds:6.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "startup_phases": phases}, indent=2) + "\n")


def report(rows: list[dict], mb: float) -> None:
    print(f"\nthe six Gutenberg books in Google's layout: {mb:.1f} MB; length 128, 20 predictions, one run")
    print(
        f"{'input':>9} {'dupe':>4} {'side':>8} {'seconds':>8} {'CPU s':>7} {'MB/s':>6} {'peak MB':>8} {'instances':>9}"
    )
    for r in rows:
        speed = f"{mb / r['seconds']:.3f}" if r["input"] == "books" else "-"
        print(
            f"{r['input']:>9} {r['dupe']:>4} {r['side']:>8} {r['seconds']:>8.2f} {r['cpu_s']:>7.2f} {speed:>6} "
            f"{r['peak_mb']:>8.0f} {r['instances']:>9}"
        )
    by = {(r["input"], r["dupe"], r["side"]): r for r in rows}
    start = by[("300 lines", 1, "bertprep")]["seconds"]
    print(
        f"\nfixed start-up ({STARTUP_LINES} lines): bertprep {start:.2f} s, Google {by[('300 lines', 1, 'google')]['seconds']:.2f} s"
    )
    for dupe in sorted({r["dupe"] for r in rows if r["input"] == "books"}):
        ours, google = by[("books", dupe, "bertprep")], by[("books", dupe, "google")]
        print(
            f"dupe {dupe}: Google {google['seconds']:.1f} s / bertprep {ours['seconds']:.2f} s = "
            f"{google['seconds'] / ours['seconds']:.1f}x the speed (CPU seconds {google['cpu_s'] / ours['cpu_s']:.1f}x; "
            f"without bertprep's start-up {google['seconds'] / max(ours['seconds'] - start, 1e-9):.1f}x)"
        )


if __name__ == "__main__":
    main()
