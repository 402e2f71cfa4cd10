"""Optimizers and the learning-rate schedule, for both ``berttrain pretrain`` and ``berttrain finetune``."""
