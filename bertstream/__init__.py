"""bertstream: BERT pretraining and fine-tuning with Apache Beam preprocessing and a streaming PyTorch trainer.

One import namespace over the folders the design fixes at the top of the checkout: ``bertstream.pipelines``
(``pipelines/``, the ``bertprep`` jobs), ``bertstream.trainer`` (``trainer/``, ``berttrain``),
``bertstream.schemas`` (``schemas/``, the contract both read) and ``bertstream.cli`` (``cli/``, what both
command lines are generated from). The wheel maps them with setuptools' ``package-dir``; in a checkout the
links beside this file do the same, so any checkout (a worktree, a baseline commit) imports its own code.
"""
