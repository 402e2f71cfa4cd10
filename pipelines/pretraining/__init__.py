"""``bertprep pretraining``: the stages in their order, each in its module, and the pipeline that joins them.

1. read: files -> documents with stable ids: the inputs room's ``ReadDocuments`` (``pipelines/inputs/``);
   ``dedup`` then drops duplicates, when asked
2. ``segment``: documents -> sentences (rules in ``segmenter``; Chinese word boundaries in ``chinese_words``)
3. ``tokenize``: sentences -> WordPiece ids
4. ``group``: documents -> groups (the random-next pools) and work units
5. ``instances``: a group -> instance pairs, Google's algorithm (``kernels/``: compiled)
6. ``masking``: static 80/10/10 masks
7. ``write``: Arrow and WebDataset shards, with their statistics (``stats``)
8. ``finalize``: the manifest, written last and atomically

``pipeline`` runs them (``run_pretraining``); ``config`` holds ``PretrainingConfig``; ``common/progress`` draws
the live line.
"""
