"""``python -m trainer ...`` / ``torchrun ... -m trainer pretrain ...``: the berttrain command line."""

from trainer.cli import main

main()
