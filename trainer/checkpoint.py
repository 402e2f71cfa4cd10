"""Checkpoints: ``RUN_DIR/checkpoints/step-NNNNNNN/``, written atomically, the last k kept.

A checkpoint folder holds ``model.safetensors`` (parameter names as Hugging Face ``BertForPreTraining``),
``optimizer.pt`` and ``rng.pt`` (tensors only, loaded with ``weights_only=True``), ``state.json``
(step, scheduler, data position, metrics so far) and ``config.json`` (the resolved run configuration) plus
``vocab.txt``. It is written into ``step-NNNNNNN.tmp-*`` and renamed into place, so a folder without the
``.tmp`` suffix is complete: a process killed mid-write leaves only a temporary folder, which the next run
ignores and removes. ``--resume auto`` takes the newest folder that loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import torch
from safetensors.torch import load_file, save_file

from bertstream.schemas.whole_file import read_whole
from bertstream.trainer.errors import UserError
from bertstream.trainer.model_config import BertConfig

CHECKPOINTS = "checkpoints"
MODEL_FILE = "model.safetensors"
_STEP_DIR = re.compile(r"^step-(\d{7,})$")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint folder is missing, incomplete or does not match the run."""


class Incomplete(CheckpointError):
    """A checkpoint lacks files or state. ``weights_load``: what it lacks is a resume's alone (the optimizer,
    the RNG, the data position), so its weights still start a new phase: the owner of how a run starts
    (``bertstream.trainer.run_folder``) says with which flags."""

    def __init__(self, path: Path, missing: list[str], weights_load: bool) -> None:
        super().__init__(f"{path}: incomplete checkpoint, lacks {', '.join(missing)}")
        self.path, self.weights_load = path, weights_load


def step_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step-{step:07d}"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoint folders, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


def newest_in(folder: Path) -> Path:
    """``folder`` itself, or for a run folder (one with ``checkpoints/``) its newest complete checkpoint: what
    ``finetune --init``, ``embed --init`` and ``export-hf`` accept alike."""
    if not (folder / CHECKPOINTS).is_dir():
        if _run_without_checkpoint(folder):
            # "checkpoint lacks model.safetensors" named a checkpoint the run never wrote
            raise CheckpointError(f"{folder}: a run folder with no checkpoint yet ({CHECKPOINTS}/ was never written)")
        return folder
    found = list_checkpoints(folder)
    if not found:
        raise CheckpointError(f"{folder}: run folder without a complete checkpoint in {CHECKPOINTS}/")
    return found[-1]


def _run_without_checkpoint(folder: Path) -> bool:
    """A run folder stopped before its first checkpoint: the run's own config.json (its "model" and its "train"
    or "finetune" settings; a Hugging Face config.json has neither) and no checkpoint's files."""
    if any((folder / f).exists() for f in (MODEL_FILE, "state.json")) or not (folder / "config.json").is_file():
        return False
    try:
        config = json.loads(read_whole(folder / "config.json", "config.json"))
    except (OSError, ValueError, UserError):
        return False  # not ours to judge here: the caller reads it and says what is wrong
    return isinstance(config, dict) and "model" in config and ("train" in config or "finetune" in config)


def remove_partial(run_dir: str | Path) -> list[Path]:
    """Delete temporary folders left by a process killed while writing a checkpoint."""
    root = Path(run_dir) / CHECKPOINTS
    gone = [p for p in root.glob("step-*.tmp-*")] if root.is_dir() else []
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


def save(
    run_dir: str | Path,
    step: int,
    *,
    model_state: dict[str, torch.Tensor],
    optimizer: dict | None,
    rng: dict[str, torch.Tensor],
    state: dict[str, Any],
    config: dict[str, Any],
    vocab_text: str,
    keep: int,
) -> Path:
    final = step_dir(run_dir, step)
    weights = {k: v.detach().cpu().contiguous() for k, v in model_state.items()}
    spoilt = [k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if spoilt:  # the loops stop before a NaN step; this is the last guard: never a checkpoint that cannot be used
        raise CheckpointError(
            f"step {step}: not saved, weights hold NaN or inf ({', '.join(spoilt[:3])}"
            f"{', ...' if len(spoilt) > 3 else ''}); the last checkpoint is kept"
        )
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        write_tensors(tmp / MODEL_FILE, weights, {"format": "pt", "step": str(step)})
        if optimizer is not None:
            save_torch(optimizer, tmp / "optimizer.pt")
        save_torch(rng, tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=2) + "\n")
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp / "vocab.txt").write_text(vocab_text, encoding="utf-8")
        _fsync_dir(tmp)
        if final.exists():  # re-saving the same step (e.g. a resumed run's final checkpoint)
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    except BaseException as e:
        # A full disk, a kill (SIGTERM, Ctrl-C), a write error: no partial folder is left, the last checkpoint
        # stays the newest, and the user reads one line naming the checkpoint.
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise CheckpointError(
                f"checkpoint {final} could not be written: {e.strerror or e} ({e.filename or tmp}); "
                "the last checkpoint is kept"
            ) from e
        if type(e).__module__.startswith("safetensors"):  # its own write errors (not a worker's RuntimeError)
            raise CheckpointError(
                f"checkpoint {final} could not be written ({type(e).__name__}: {e}); the last checkpoint is kept"
            ) from e
        raise
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


class _KeepsWriteError:
    """The file ``torch.save`` writes through, keeping the first failed write's exception: torch's zip writer
    reports a full disk as ``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs
    598``, naming neither the file nor the cause, and after a failed write it writes its end record again (its
    context's exit, then its C++ destructor, which may run once the file is closed). So after the first failure
    nothing more is written and nothing more is raised: a SIGTERM or Ctrl-C landing in a write came out as that
    ``RuntimeError`` (the interrupt lost), or, from the destructor writing to the closed file, as
    ``terminate called after throwing an instance of 'pybind11::error_already_set'`` and SIGABRT (round 8's
    rerun, a SIGTERM during the first checkpoint). The checkpoint is abandoned anyway: its folder is removed."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.error: BaseException | None = None

    def write(self, data: bytes) -> int:
        if self.error is not None or self.file.closed:
            return len(data)
        try:
            return self.file.write(data)
        except BaseException as e:  # an OSError, or an interrupt raised by the signal handler inside the write
            self.error = e
            raise

    def flush(self) -> None:
        if self.error is None and not self.file.closed:
            self.file.flush()


def save_torch(obj: Any, path: Path) -> None:
    """``torch.save(obj, path)`` whose write errors are the ``OSError`` they are (a full disk: ``No space left on
    device``), not torch's zip-writer assertion, and whose interrupts stay interrupts."""
    with open(path, "wb") as f:
        keeper = _KeepsWriteError(f)
        try:
            torch.save(obj, cast(IO[bytes], keeper))  # what torch.save calls: write (and flush)
        except RuntimeError:
            if keeper.error is None:
                raise
            raise keeper.error from None
        if keeper.error is not None:  # raised into torch's writer and not out of it: the file is not whole
            raise keeper.error


def write_text_atomic(path: Path, text: str) -> None:
    """``path`` holds ``text`` whole, or keeps what it held: written beside it, then renamed (a full disk or a
    kill mid-write leaves no torn results.json or metrics.jsonl; the temporary file is removed). The file is
    synced before the rename: a crash after it finds the new text, not an empty file under the old name."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    for f in path.iterdir() if path.is_dir() else []:
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(slots=True)
class Loaded:
    path: Path
    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict | None
    rng: dict[str, torch.Tensor]
    state: dict[str, Any]
    config: dict[str, Any]


def describe(loaded: Loaded) -> str:
    """The checkpoint's name, step and a digest of its weights and state, read back from disk: what the ranks of
    a run compare before they continue it (the same name on two nodes can hold two histories)."""
    h = hashlib.sha256()
    for name in (MODEL_FILE, "state.json"):
        with open(loaded.path / name, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    return f"{loaded.path.name} (step {loaded.step}, sha256 {h.hexdigest()[:12]})"


WEIGHT_FILES = (MODEL_FILE, "state.json", "config.json")
RESUME_FILES = (*WEIGHT_FILES, "optimizer.pt", "rng.pt")  # what continuing the exact run needs
RESUME_STATE = ("scheduler", "data")  # state.json keys, likewise
_RESUME_ONLY = {"optimizer.pt", "rng.pt", *(f"state.json {k!r}" for k in RESUME_STATE)}


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it, and another thread could create a
    file in between): Linux shows it in /proc; elsewhere the set-and-restore is the only way."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_tensors(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """The one writer of safetensors files (checkpoints and exports). safetensors creates its file 0600 whatever
    the umask; the file gets the mode every other file of the folder has (0644 under the usual umask), so a
    model exported for serving or shared with a group is readable like its config.json beside it. A failed write
    (a full disk, a quota, a file-size limit) is the ``OSError`` it is: safetensors reports it as its own error
    type, with the errno only in its words ("I/O error: File too large (os error 27)"), a traceback before."""
    try:
        save_file(tensors, str(path), metadata=metadata)
    except Exception as e:  # noqa: BLE001 - safetensors' SafetensorError, which its Python side does not export
        code = re.search(r"\(os error (\d+)\)", str(e))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from None
    os.chmod(path, 0o666 & ~_umask())


def read_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors, on CPU: the one reader of weights files (our checkpoints, ``--init``, Hugging
    Face folders). A damaged or truncated file raises ``CheckpointError`` naming it: safetensors raises several
    types of its own, a traceback before."""
    try:
        return load_file(str(path), device="cpu")
    except Exception as e:  # noqa: BLE001 - safetensors' own error types, and OSError
        raise CheckpointError(
            f"{path}: cannot be read ({type(e).__name__}: {e}); the file is damaged or truncated"
        ) from None


def read_torch(path: Path, error: type[Exception] = CheckpointError) -> Any:
    """A checkpoint's ``.pt`` (or ``.bin``) file, as tensors and plain containers only (``weights_only``): a
    damaged file, or one of pickled objects (code would run on loading it), is ``error`` in one line naming it,
    without torch's advice to load it with ``weights_only=False`` (a checkpoint is untrusted input)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch's unpicklers raise KeyError, UnpicklingError, RuntimeError...
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        why = (
            f"it holds a pickled {found.group(1)}, refused"
            if found
            else f"{type(e).__name__}; damaged or no torch file"
        )
        raise error(f"{path}: cannot be read as a plain tensor dict ({why})") from None


def load(path: str | Path, *, with_optimizer: bool = True) -> Loaded:
    """A checkpoint to resume (``with_optimizer``: all of it) or to take the weights of; an incomplete one is
    refused rather than resumed with fresh optimizer moments or another dropout stream without a word."""
    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(f"{p}: no such checkpoint folder")
    missing = [name for name in (RESUME_FILES if with_optimizer else WEIGHT_FILES) if not (p / name).is_file()]
    if missing:
        raise _incomplete(p, missing, with_optimizer)
    model = read_tensors(p / MODEL_FILE)
    try:
        state = json.loads(read_whole(p / "state.json", "the checkpoint's state.json"))
        config = json.loads(read_whole(p / "config.json", "the checkpoint's config.json"))
    except Exception as e:  # JSON and I/O errors alike: the folder is unusable
        raise CheckpointError(f"{p}: cannot load ({type(e).__name__}: {e})") from e
    opt = read_torch(p / "optimizer.pt") if with_optimizer else None
    rng = read_torch(p / "rng.pt") if (p / "rng.pt").is_file() else {}
    for name, value in (("optimizer.pt", opt), ("rng.pt", rng)):
        if value is not None and not isinstance(value, dict):
            raise CheckpointError(f"{p / name}: holds a {type(value).__name__}, not a state dict")
    if not isinstance(state, dict) or not isinstance(config, dict):
        raise CheckpointError(f"{p}: state.json and config.json must each hold an object")
    step = state.get("step")
    if "step" in state and (isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 1 << 48):
        # what is read is what is meant: step -5 resumed and wrote step--000004
        raise CheckpointError(f"{p}/state.json: step {step!r} is not a step count (an integer >= 0)")
    lacking = [k for k in RESUME_STATE if k not in state] if with_optimizer else []
    if "step" not in state or lacking or not isinstance(config.get("model"), dict):
        raise _incomplete(
            p,
            [f"state.json {k!r}" for k in ["step", *lacking] if k not in state]
            + ([] if isinstance(config.get("model"), dict) else ["config.json 'model'"]),
            with_optimizer,
        )
    named = _STEP_DIR.match(p.name)
    if named and int(named.group(1)) != step:  # the newest by name is resumed: another step's would repeat steps
        raise CheckpointError(f"{p}: its name says step {int(named.group(1))}, its state.json step {step}")
    # Checkpoints are saved floating point and finite (save): other weights were cast or trained on silently
    # (an int64 tensor loaded into a float parameter; NaN weights read as "training diverged ... lower --lr").
    odd = next((k for k, v in model.items() if not v.is_floating_point()), None)
    spoilt = next((k for k, v in model.items() if odd is None and not bool(torch.isfinite(v).all())), None)
    if odd is not None or spoilt is not None:
        why = f"{odd} is {model[odd].dtype}, not floating point" if odd else f"{spoilt} holds NaN or inf"
        raise CheckpointError(f"{p}/{MODEL_FILE}: {why}; the file is damaged")
    try:  # config.json is untrusted: a string hidden_size or 10**9 layers failed in a traceback when the model was built
        BertConfig.from_dict(config["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{p}/config.json: 'model': {e}") from None
    world = config.get("world_size", 1)
    if isinstance(world, bool) or not isinstance(world, int) or not 1 <= world < 1 << 31:
        raise CheckpointError(f"{p}/config.json: world_size {world!r} is not a process count (an integer >= 1)")
    return Loaded(p, int(state["step"]), model, opt, rng, state, config)


def _incomplete(p: Path, missing: list[str], with_optimizer: bool) -> Incomplete:
    return Incomplete(p, missing, weights_load=with_optimizer and set(missing) <= _RESUME_ONLY)


def latest(
    run_dir: str | Path, *, with_optimizer: bool = True, explain: Callable[[CheckpointError], str] = str
) -> Loaded | None:
    """The newest checkpoint of a run that loads; broken ones are skipped (named on stderr, as ``explain`` words
    the error)."""
    import sys

    for path in reversed(list_checkpoints(run_dir)):
        try:
            return load(path, with_optimizer=with_optimizer)
        except CheckpointError as e:
            print(f"[berttrain] skipping unreadable checkpoint: {explain(e)}", file=sys.stderr)
    return None


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    out = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def set_rng_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
