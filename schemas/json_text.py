"""JSON text read with one way to fail: every way a text is no JSON value raises ``json.JSONDecodeError``, which
the readers of manifests, configs, tokenizers and JSON lines already turn into their one line or counted drop.

``json.loads`` itself raises other errors for hostile text: ``RecursionError`` for nesting past Python's stack
(``[[[[...`` 100,000 deep in a manifest.json was a traceback), ``ValueError`` for an integer past Python's digit
limit, ``UnicodeDecodeError`` for bytes that are no UTF-8.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def loads(text: str | bytes | bytearray) -> Any:
    """``json.loads(text)``, raising ``json.JSONDecodeError`` for every text that is no JSON value."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        why = f"nested deeper than Python reads ({sys.getrecursionlimit()} levels)"
        raise json.JSONDecodeError(why, "", 0) from None
    except ValueError as e:  # UnicodeDecodeError too
        raise json.JSONDecodeError(str(e).splitlines()[0] if str(e) else type(e).__name__, "", 0) from None
