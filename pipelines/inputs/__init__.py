"""The inputs room: everything that turns ``--input`` into documents, for every job that reads text (pretraining,
``bertprep vocab``, ``bertprep extract``; the task commands list their files here too).

1. ``options``: ``--input``, ``--format`` and ``--text-field``, declared once for every job's config
2. ``resolve``: ``--input`` patterns (paths, globs, URLs, ``format:`` prefixes, ``save_to_disk`` folders) ->
   sorted ``InputFile``s with their sizes, formats and corpus-relative names
3. ``detect``: ``--format auto``, each file judged by asking each format for its evidence, in turn
4. ``read``: a file -> its ranges -> ``Document``s (``documents``), by the format's module
5. ``formats/``: one module per format, named as the format is, and the table of them (``formats/__init__``)

``limits``: the one cap on a record (a page, a line, a row, a book), ``MAX_RECORD_BYTES``, every reader's.
Helpers of single formats: ``columnar`` (Parquet and Arrow tables; ``parquet_batches`` sizes its Parquet batches,
``arrow_messages`` reads an Arrow stream's messages from their metadata), ``mediawiki_xml``, ``compressed`` (a
dump's bzip2/gzip/xz streams, decompressed in pieces) and ``wikitext`` (dumps).
Bytes, compression and lines are ``common/files.py``'s, shared with the task readers.

Adding a format ``foo``: write ``formats/foo.py`` (its ``detect``, then ``SPLITS``, ``anchor`` and ``parse`` for
lines, or ``ranges`` and ``read`` for records: ``formats/__init__`` says what each is), add ``"foo"`` to the table
in ``formats/__init__.py`` (its ``--format`` name and its place in ``DETECTION_ORDER``), and test it in
``tests/pipelines/inputs/formats/test_foo.py``. Nothing outside this folder changes.
"""
