"""Old against new, per stage, on the same data in one run: sentence segmentation and reading + cleaning.

The old code is this repository's at ``--base`` (default: the commit before issue 18's per-byte work),
taken with ``git show`` into a temporary folder and imported from there under other module names; the new
code is the checkout's. Both run on the same documents of the shared pretraining text (one copy: the
Wikipedia extracts and six Gutenberg books, 22 MB), interleaved (old, new, old, new, ...), and the best of
``--repeats`` rounds is kept for each, so a busy machine slows both alike. Prints each stage's MB/s and the
ratio new/old, and checks that both give the same output.

    python benchmarks/stage_speed.py
    python benchmarks/stage_speed.py --base b6b896c --repeats 7
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHARED = REPO.parent / "shared" / "data" / "pretrain"
BASE = "b6b896c"  # main's head when the per-byte work began
# Old modules, in import order: each imports the ones before it under their old names.
OLD = {
    "bertstream.pipelines.common.byte_ranges": "pipelines/common/byte_ranges.py",
    "bertstream.pipelines.common.files": "pipelines/common/files.py",
    "bertstream.pipelines.pretraining.read": "pipelines/pretraining/read.py",
    "bertstream.pipelines.pretraining.segmenter": "pipelines/pretraining/segmenter.py",
    "bertstream.pipelines.pretraining.segment": "pipelines/pretraining/segment.py",
}


def old_modules(base: str) -> dict[str, ModuleType]:
    """The modules of ``OLD`` as they were at ``base``, imported as ``old_<name>``; each sees its old
    siblings where it imports them (the rest of the package is the checkout's)."""
    folder = Path(tempfile.mkdtemp(prefix="old_code_"))
    loaded: dict[str, ModuleType] = {}
    saved = {name: sys.modules.get(name) for name in OLD}
    try:
        for name, path in OLD.items():
            src = subprocess.run(
                ["git", "show", f"{base}:{path}"], cwd=REPO, capture_output=True, text=True, check=True
            )
            file = folder / path.replace("/", "_")
            file.write_text(src.stdout)
            spec = importlib.util.spec_from_file_location(f"old_{name}", file)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod  # dataclasses look their module up while the class is made
            spec.loader.exec_module(mod)
            loaded[name] = mod
            sys.modules[name] = mod  # the next old module imports this one
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
    return loaded


def best_of(repeats: int, fns: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Best wall time of each function over ``repeats`` interleaved rounds."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=BASE, help="the commit of the old code")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if not SHARED.exists():
        raise SystemExit(f"needs the shared data at {SHARED}")
    old = old_modules(args.base)
    from bertstream.pipelines.inputs import read as new_read
    from bertstream.pipelines.inputs.resolve import resolve_inputs
    from bertstream.pipelines.pretraining import segment as new_segment

    files = resolve_inputs([f"wikiextractor:{SHARED}/wikipedia/*", f"text:{SHARED}/gutenberg/*.txt"], "sentences")
    mb = sum(f.bytes for f in files) / 1e6

    def reader(mod: ModuleType) -> Callable[[], list]:
        def read() -> list:
            return [(f.format, list(mod.read_documents(f.path, f.format, Counter()))) for f in files]

        return read

    def segmenter(mod: ModuleType, batches: list) -> Callable[[], list]:
        return lambda: [mod.segment_documents(b) for b in batches]

    rows = []
    r_old, r_new = reader(old["bertstream.pipelines.pretraining.read"]), reader(new_read)
    same = [[(d.doc_id, d.paragraphs, d.presegmented) for d in docs] for _, docs in r_old()] == [
        [(d.doc_id, d.paragraphs, d.presegmented) for d in docs] for _, docs in r_new()
    ]
    t = best_of(args.repeats, {"old": r_old, "new": r_new})
    rows.append(("read + clean", mb, t, same))

    docs = [d for _, ds in r_new() for d in ds]
    batches = [new_read.DocumentBatch(docs[i : i + 50]) for i in range(0, len(docs), 50)]
    text_mb = sum(len(p) for d in docs for p in d.paragraphs) / 1e6
    s_old = segmenter(old["bertstream.pipelines.pretraining.segment"], batches)
    s_new = segmenter(new_segment, batches)
    same = [b[0] for b in s_old()] == [b[0] for b in s_new()]
    t = best_of(args.repeats, {"old": s_old, "new": s_new})
    rows.append(("segment", text_mb, t, same))

    print(f"old: {args.base}; new: the checkout; best of {args.repeats} interleaved rounds")
    print(
        f"{'stage':>14} {'MB':>6} {'old s':>7} {'new s':>7} {'old MB/s':>9} {'new MB/s':>9} {'new/old':>8} {'same':>5}"
    )
    for stage, size, t, same in rows:
        print(
            f"{stage:>14} {size:>6.1f} {t['old']:>7.3f} {t['new']:>7.3f} {size / t['old']:>9.1f} "
            f"{size / t['new']:>9.1f} {t['old'] / t['new']:>7.2f}x {str(same):>5}"
        )


if __name__ == "__main__":
    main()
