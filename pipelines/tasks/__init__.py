"""Downstream task pipelines (``bertprep task classification|ner|squad``): labelled data -> task shards.

Read -> (Labels) -> Featurize -> AssignShard/Write -> Finalize, like the pretraining pipeline: each stage a
labelled composite over pure functions, counters carried as data, the manifest written last. The layouts
are ``bertstream.schemas.tasks``; ``bertstream.pipelines.tasks.pipeline.run_task`` validates and runs.

Each kind is one room (``classification/``, ``ner/``, ``squad/``) whose ``KIND`` (``kind.TaskKind``) owns its
flags, parser, featurizer, label plan and files; ``kinds.KINDS`` lists them and the commands come from it.
"""
