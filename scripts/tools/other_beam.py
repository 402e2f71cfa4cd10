"""The Beam-sensitive tests on the other apache-beam that pyproject admits, in a throw-away environment.

CI installs one Beam (the newest pip resolves); pyproject admits every minor in the Dask runner's
``TESTED_BEAM`` (``tests/test_packaging.py`` holds the two equal). This script checks the other one:

    python scripts/tools/other_beam.py                 # the minor of TESTED_BEAM not installed here
    python scripts/tools/other_beam.py --beam 2.77.0   # a given release

It creates a virtual environment in a temporary folder that sees this environment's packages (one ``.pth``
line: torch and the rest are not downloaded again) and installs, with this environment's pip, bertstream from
this checkout together with the other ``apache-beam[dask]``: pip resolves bertstream's requirements against that
Beam (the check that ``pip install`` works beside it), and the Beam installed there shadows this one. Then it
runs every test of the side that imports Beam, slow ones included: the pipelines (``tests/pipelines``: the runners,
the Dask translation, the stages' type hints, Beam's error texts), the command lines (``tests/cli``), the S3 run
(``tests/test_s3_end_to_end.py``), the declared range (``tests/test_packaging.py``) and the shard pins
(``tests/test_shard_pins.py``), on two workers. A narrower list missed what 2.78 changed outside the runners (a
stage's output type read from its annotation, the S3 client's error text). Exit status: pytest's (0: all
passed); 2 when the environment could not be made. Several minutes on 2 cores (``nice`` it); nothing is left
behind unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = (
    "tests/pipelines",
    "tests/cli",
    "tests/test_s3_end_to_end.py",
    "tests/test_packaging.py",
    "tests/test_shard_pins.py",
)


def other_beam() -> str:
    """A pip requirement for the newest release of the TESTED_BEAM minor this environment does not run."""
    import apache_beam

    from bertstream.pipelines.runners.dask_runner import TESTED_BEAM

    here = ".".join(apache_beam.__version__.split(".")[:2])
    others = [m for m in TESTED_BEAM if m != here]
    if not others:
        raise SystemExit(f"TESTED_BEAM is {TESTED_BEAM}, the Beam installed here: there is no other to check")
    return f"=={others[-1]}.*"


def make_env(folder: Path) -> Path:
    """A venv at ``folder`` (no pip of its own) whose Python also sees this environment's site-packages, after
    its own (so what is installed there wins), with their ``.pth`` files (editable installs) processed."""
    venv.EnvBuilder(with_pip=False).create(folder)
    python = folder / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    here = sysconfig.get_paths()["purelib"]
    Path(own, "zz_parent_env.pth").write_text(f"import site; site.addsitedir({here!r})\n", encoding="utf-8")
    return python


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--beam", help="an apache-beam version (default: the TESTED_BEAM minor not installed here)")
    ap.add_argument("--keep", metavar="DIR", help="make the environment in DIR and leave it there")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args()
    spec = f"=={args.beam}" if args.beam else other_beam()
    with tempfile.TemporaryDirectory(prefix="other-beam-") as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp) / "env"
        python = make_env(folder)
        install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-build-isolation"]
        print(f"[other_beam] installing bertstream beside apache-beam{spec} into {folder}", flush=True)
        got = subprocess.run([*install, "-e", f"{ROOT}[dask]", f"apache-beam[dask]{spec}"], cwd=ROOT)
        if got.returncode:
            print(f"[other_beam] pip could not install bertstream beside apache-beam{spec}", file=sys.stderr)
            return 2
        version = subprocess.run(
            [str(python), "-c", "import apache_beam, bertstream.pipelines; print(apache_beam.__version__)"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if version.returncode:
            print(f"[other_beam] the environment does not import: {version.stderr[-2000:]}", file=sys.stderr)
            return 2
        print(f"[other_beam] apache-beam {version.stdout.strip()}: running {' '.join(TESTS)}", flush=True)
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        env.pop("PYTHONPATH", None)
        pytest = [str(python), "-m", "pytest", "-q", "-p", "no:randomly", "-m", "slow or not slow", "-n", "2", *TESTS]
        return subprocess.run([*pytest, *args.pytest_args], cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
