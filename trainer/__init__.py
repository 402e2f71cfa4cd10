"""Streaming BERT trainer: reads what ``schemas`` defines; never imports ``pipelines``.

The commands' rooms: ``pretrain/`` (``berttrain pretrain`` and ``plot``), ``finetune/`` (``berttrain finetune``),
``embed`` (``berttrain embed``). What they share, below them: ``data/`` (the pretraining loader), ``optim/`` (the
optimizer table and the schedule), ``hf/`` (Hugging Face folders, ``berttrain export-hf``), ``model`` and
``model_config``, ``weights`` (``--init``), ``checkpoint``, ``runtime`` (precision, DDP, logging), ``training``
(the training state and its step), ``checkpoint_writer`` (the checkpoints a run writes), ``config`` (the flags),
``errors`` (``UserError``). Above them: ``cli`` and ``cli_errors``.
"""
