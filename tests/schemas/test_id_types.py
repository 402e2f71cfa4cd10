"""One id-type table: names, Arrow types, NumPy dtypes and widths agree, and lookups name a bad value."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from bertstream.schemas import id_types
from bertstream.schemas.version import SchemaError
from bertstream.schemas.vocab import Vocab


@pytest.mark.parametrize("t", id_types.ID_TYPES, ids=lambda t: t.name)
def test_each_id_type_is_consistent(t):
    assert pa.from_numpy_dtype(t.numpy) == t.arrow and t.numpy.itemsize == t.width
    assert t.numpy.byteorder in ("<", "=", "|") and np.dtype(t.name) == t.numpy
    assert id_types.id_type(t.name) is id_types.by_width(t.width) is id_types.by_arrow(t.arrow) is t
    info = np.iinfo(t.numpy)
    assert info.max >= id_types.MAX_UINT16_VOCAB - 1  # every id of the largest uint16 vocabulary fits


def test_vocab_size_picks_the_narrowest_type_that_holds_every_id():
    assert id_types.id_type_for(id_types.MAX_UINT16_VOCAB) == "uint16"
    assert id_types.id_type_for(id_types.MAX_UINT16_VOCAB + 1) == "int32"
    tokens = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a")
    assert Vocab(tokens).id_type == "uint16"


def test_unknown_id_types_are_refused_by_name():
    with pytest.raises(SchemaError, match="id type must be one of \\['int32', 'uint16'\\], got 'int64'"):
        id_types.id_type("int64")
    with pytest.raises(SchemaError, match="id width 8 is neither 2 nor 4"):
        id_types.by_width(8)
    assert id_types.by_arrow(pa.int64()) is None
