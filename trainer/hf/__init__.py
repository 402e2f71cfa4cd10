"""Hugging Face interop: our checkpoints as ``transformers`` folders and back (``convert``), our ``BertConfig`` and
their ``config.json`` (``config``), and the pre-LN model's names and positions as RoBERTa-PreLayerNorm
(``prelayernorm``), a fine-tuned model's head as its task class (``tasks``). Nothing here imports ``transformers``: the files are written and read directly."""
