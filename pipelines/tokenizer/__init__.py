"""The tokenizer every job builds from --vocab (load.py) and the backend that encodes with it (wordpiece_backend.py)."""
