"""Token id types, version 1: the one place that maps an id type name to its Arrow type, NumPy dtype and width.

A dataset's ids are ``uint16`` when its vocabulary has at most 65,535 entries, else ``int32``; the name is
what ``manifest.json`` (``vocab.id_type``) records, the width is what a WebDataset ``.bert`` payload records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from bertstream.schemas.version import SchemaError


@dataclass(frozen=True, slots=True)
class IdType:
    name: str  # manifest vocab.id_type
    arrow: pa.DataType
    numpy: np.dtype  # little-endian, as every bertstream file stores it
    width: int  # bytes per id


UINT16 = IdType("uint16", pa.uint16(), np.dtype("<u2"), 2)
INT32 = IdType("int32", pa.int32(), np.dtype("<i4"), 4)
ID_TYPES: tuple[IdType, ...] = (UINT16, INT32)
_BY_NAME = {t.name: t for t in ID_TYPES}
_BY_WIDTH = {t.width: t for t in ID_TYPES}
MAX_UINT16_VOCAB = 65535


def id_type_for(vocab_size: int) -> str:
    """Name of the id type that holds every id of a vocabulary of this size."""
    return UINT16.name if vocab_size <= MAX_UINT16_VOCAB else INT32.name


def id_type(name: str) -> IdType:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise SchemaError(f"id type must be one of {sorted(_BY_NAME)}, got {name!r}") from None


def by_width(width: int) -> IdType:
    """The id type stored ``width`` bytes per id (what the binary layouts record)."""
    try:
        return _BY_WIDTH[width]
    except KeyError:
        raise SchemaError(f"id width {width} is neither {' nor '.join(str(w) for w in _BY_WIDTH)}") from None


def by_arrow(t: pa.DataType) -> IdType | None:
    """The id type whose Arrow type is ``t`` (``None`` for any other type)."""
    return next((i for i in ID_TYPES if i.arrow == t), None)


def arrow_type(name: str) -> pa.DataType:
    return id_type(name).arrow


def numpy_dtype(name: str) -> np.dtype:
    return id_type(name).numpy


def width(name: str) -> int:
    return id_type(name).width
