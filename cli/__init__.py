"""Configuration for both command lines: frozen, slotted dataclasses whose fields carry their flag's help and
default (:mod:`bertstream.cli.options` turns them into click options and back), validated on construction with the
one :func:`bertstream.cli.errors.check`. Depends on nothing of ours, so ``pipelines`` and ``trainer`` both use it."""
