"""One base class for the trainer's user errors: every error class the trainer defines is a ``UserError``, so
``berttrain`` shows each as one ``Error:`` line without listing the rooms that raise them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import bertstream.trainer
from bertstream.trainer.errors import RunError, UserError


def _error_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for mod in pkgutil.walk_packages(bertstream.trainer.__path__, "bertstream.trainer."):
        if mod.name.endswith("__main__"):
            continue  # runs the command line when imported
        module = importlib.import_module(mod.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = obj
    return found


def test_every_error_the_trainer_defines_is_a_user_error():
    classes = _error_classes()
    assert len(classes) >= 7, sorted(classes)  # RunError, Diverged, CheckpointError, ShardError, InitError, ...
    internal = {"bertstream.trainer.data.loader.TooFewSamples"}  # caught and re-raised as RunError naming the flag
    assert [n for n, c in classes.items() if not issubclass(c, UserError) and n not in internal] == []


def test_user_errors_keep_their_builtin_base():
    # callers that catch ValueError or RuntimeError (torch's DataLoader re-raising a worker's ShardError) still do
    from bertstream.trainer.checkpoint import CheckpointError
    from bertstream.trainer.data.refs import ShardError
    from bertstream.trainer.weights import InitError

    assert issubclass(RunError, RuntimeError) and issubclass(ShardError, RuntimeError)
    assert issubclass(CheckpointError, RuntimeError) and issubclass(InitError, ValueError)
