"""Streaming BERT trainer: reads what ``schemas`` defines; never imports ``pipelines``."""
