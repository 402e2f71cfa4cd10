"""``berttrain pretrain|finetune --config FILE``: the flags of a saved run, read back as the defaults of a new
command line (``bertstream.cli.options.config_option``; a flag given there wins).

The files a run leaves: pretraining's ``RUN/config.json`` (and each checkpoint's copy), ``{"train": flags, ...}``;
fine-tuning's ``RUN/config.json`` (and each checkpoint's), ``{"finetune": flags, ...}``, and its ``results.json``,
``{"config": flags, "epochs": [...], ...}`` (runs written before fine-tuning saved a config.json). A file of the
other command is refused, naming the command it belongs to.
"""

from __future__ import annotations

from typing import Any

from bertstream.cli import options
from bertstream.cli.errors import UsageError
from bertstream.schemas import json_text
from bertstream.schemas.whole_file import WholeFileError, read_whole
from bertstream.trainer.run_folder import FROM_SAVED_FLAGS

# command -> the key of its flags in its config.json
_KEYS = {"pretrain": "train", "finetune": "finetune"}


def _command_of(saved: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(the command whose run saved this, its flags), or None for a file of neither."""
    for command, key in _KEYS.items():
        if isinstance(saved.get(key), dict):
            return command, saved[key]
    if isinstance(saved.get("config"), dict) and "epochs" in saved:  # a fine-tuning results.json
        return "finetune", saved["config"]
    return None


def saved_flags(path: str, command: str, cls: type) -> dict[str, Any]:
    """Leaf name -> value of the run configuration in ``path`` for ``command``'s config class ``cls``."""
    try:  # the capped reader of every small file: a FIFO hung here, /dev/zero filled the memory
        saved = json_text.loads(read_whole(path, "the file").decode("utf-8"))
    except WholeFileError as e:
        raise UsageError("config", str(e)) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError("config", f"{path} does not read as JSON ({type(e).__name__}: {e})") from None
    found = _command_of(saved) if isinstance(saved, dict) else None
    if found is None:
        raise UsageError(
            "config",
            f"{path} is no berttrain run configuration (a run folder's config.json, or a fine-tuning results.json)",
        )
    owner, flags = found
    if owner != command:
        raise UsageError(
            "config", f"{path} is the configuration of a berttrain {owner} run: pass it to berttrain {owner} --config"
        )
    return options.saved_values(cls, flags)


def config_help(command: str) -> str:
    what = "RUN/config.json" if command == "pretrain" else "RUN/config.json (or RUN/results.json)"
    return (
        f"Start from a saved run's flags: {what} of a berttrain {command} run. Flags given here win; {FROM_SAVED_FLAGS}"
    )
