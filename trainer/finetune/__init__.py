"""Fine-tuning on bertstream task datasets (``bertprep task``): GLUE-style classification and regression,
CoNLL NER, SQuAD v1.1. ``berttrain finetune`` runs ``bertstream.trainer.finetune.loop.finetune``.

Modules: ``config`` (the run's dataclass), ``inputs`` (what the run starts from: both splits, the ``--init``
weights, the model built with them, checked against each other), ``resume`` (the run folder's plan, the flags a
resume keeps, the run continued), ``data`` (shards -> in-memory columns, padding, per-epoch batch plans), ``heads`` (task models, HF names),
``metrics`` (benchmark metrics), ``ner`` (words from windows), ``squad`` (span decoding), ``tasks`` (one object
per task kind: head, batch keys, scoring, predictions file), ``loop``.
"""
