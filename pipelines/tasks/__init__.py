"""Downstream task pipelines (``bertprep task classification|ner|squad``): labelled data -> task shards.

Read -> (Labels) -> Featurize -> AssignShard/Write -> Finalize, like the pretraining pipeline: each stage a
labelled composite over pure functions, counters carried as data, the manifest written last. The layouts
are ``bertstream.schemas.tasks``; ``bertstream.pipelines.tasks.pipeline.run_task`` validates and runs.
"""
