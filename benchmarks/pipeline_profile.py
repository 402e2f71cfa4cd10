"""Each stage's share of the wall time of one in-process `bertprep pretraining` run (see ``stage_profile``).

Runs ``run_pretraining`` in this process (the FnApiRunner, one in-process worker, as a plain ``bertprep
pretraining`` does) on one copy of the shared pretraining text (Wikipedia extracts and six Gutenberg books,
22 MB), with the stage sampler on, and prints the table: read, clean, segment, tokenize, group, instances,
mask, write, finalize and Beam, in thread-seconds and as shares of the wall time.

    python benchmarks/pipeline_profile.py                       # one copy, dupe 1, a vocab trained first
    python benchmarks/pipeline_profile.py --vocab vocab.txt --dupe 5 --json profile.json
    python benchmarks/pipeline_profile.py --json p.json -- pretraining --input ... --vocab v.txt --output out

After ``--``: a whole ``bertprep`` command line, run in this process under the sampler (what
``benchmarks/pipeline_scale.py --profile`` runs instead of ``bertprep``, for its in-process rows).

The vocabulary (when not given) is trained before the clock starts; nothing is written in the repository.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.stage_profile import StageProfile, profile_stages  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "pretrain"
DEFAULT_INPUTS = [f"wikiextractor:{SHARED / 'wikipedia' / '*'}", f"text:{SHARED / 'gutenberg' / '*.txt'}"]


def profile_run(
    inputs: list[str], vocab: str, out: Path, dupe: int = 1, beam_args: tuple[str, ...] = ()
) -> tuple[StageProfile, dict]:
    """One in-process run under the stage sampler: (the profile, the manifest's counters and totals)."""
    from bertstream.pipelines.pretraining.config import PretrainingConfig, PretrainingJob
    from bertstream.pipelines.pretraining.pipeline import run_pretraining

    job = PretrainingJob(
        inputs=tuple(inputs),
        vocab=vocab,
        output=str(out),
        config=PretrainingConfig(dupe_factor=dupe),
        overwrite=True,
        beam_args=beam_args,
    )
    with profile_stages() as prof:
        result = run_pretraining(job)
    manifest = json.loads((out / "manifest.json").read_text())
    del result
    return prof, {"counters": manifest["counters"], "totals": manifest["totals"]}


def profile_cli(argv: list[str], json_path: str | None) -> None:
    """``bertprep ARGV`` in this process under the sampler; the table goes to stderr, the shares to ``json_path``."""
    from bertstream.pipelines.cli import main as bertprep

    start = time.perf_counter()
    with profile_stages() as prof:
        bertprep(args=argv, standalone_mode=False)
    seconds = time.perf_counter() - start
    print(prof.table(), file=sys.stderr)
    if json_path:
        Path(json_path).write_text(json.dumps({"seconds": seconds, "shares": prof.shares()}, indent=2) + "\n")


def main() -> None:
    if "--" in sys.argv:
        at = sys.argv.index("--")
        ap = argparse.ArgumentParser()
        ap.add_argument("--json")
        profile_cli(sys.argv[at + 1 :], ap.parse_args(sys.argv[1:at]).json)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", action="append", help="format:glob (repeatable); default: one copy of the shared text")
    ap.add_argument("--vocab", help="vocab.txt; default: train a 30,522-token vocab on the input (not timed)")
    ap.add_argument("--dupe", type=int, default=1)
    ap.add_argument("--json", help="also write the shares here")
    args = ap.parse_args()
    inputs = args.input or DEFAULT_INPUTS
    tmp = Path(tempfile.mkdtemp(prefix="bench_profile_"))
    try:
        vocab = args.vocab
        if vocab is None:
            from bertstream.pipelines.vocab import VocabConfig, train_vocab

            train_vocab(inputs, tmp / "vocab", VocabConfig())
            vocab = str(tmp / "vocab" / "vocab.txt")
        start = time.perf_counter()
        prof, manifest = profile_run(inputs, vocab, tmp / "out", args.dupe)
        seconds = time.perf_counter() - start
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mb = manifest["counters"]["bytes_read"] / 1e6
    print(f"{mb:.1f} MB in {seconds:.2f} s ({mb / seconds:.2f} MB/s), {manifest['totals']['instances']} instances")
    print(prof.table())
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": seconds, "mb": mb, "shares": prof.shares()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
