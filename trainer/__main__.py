"""``python -m bertstream.trainer ...`` / ``torchrun ... -m bertstream.trainer pretrain ...``: the berttrain command line."""

from bertstream.trainer.cli import main

main()
