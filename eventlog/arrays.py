"""Arrow arrays and scalars built from their buffers, for the readers and writers that
hand numpy columns to pyarrow: ``pa.array`` and ``pa.scalar`` import pandas on first use (to
recognise its objects) — a third of a second that ``goldilocks replay`` would pay on every
run for nothing. ``pa`` is passed in: pyarrow is imported where it is used.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["int64s", "bools", "strings", "text", "filled", "numbers", "valid"]


def int64s(pa: Any, values: np.ndarray, valid: np.ndarray | None = None) -> Any:
    """int64 ``values`` as an Arrow array, null where not ``valid``."""
    values = np.ascontiguousarray(values, np.int64)
    bits = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.int64(), len(values), [bits, pa.py_buffer(values)])


def bools(pa: Any, values: np.ndarray) -> Any:
    """Booleans ``values`` as an Arrow array."""
    bits = np.packbits(np.asarray(values, np.bool_), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def strings(pa: Any, values: Sequence[bytes]) -> Any:
    """UTF-8 ``values`` as an Arrow ``large_string`` array."""
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), len(values),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))])


def text(pa: Any, value: str | None) -> Any:
    """A ``large_string`` scalar (``None``: null)."""
    if value is None:
        return pa.Array.from_buffers(pa.large_string(), 1, [
            pa.py_buffer(b"\0"), pa.py_buffer(np.zeros(2, np.int64)), pa.py_buffer(b"")])[0]
    return strings(pa, [value.encode()])[0]


def filled(pa: Any, col: Any, value: int) -> Any:
    """An integer (or timestamp) Arrow array ``col`` with its nulls replaced by ``value``."""
    if not col.null_count:
        return col
    one = np.array([value], f"<i{col.type.bit_width // 8}")
    return col.fill_null(pa.Array.from_buffers(col.type, 1, [None, pa.py_buffer(one)])[0])


def numbers(pa: Any, col: Any) -> np.ndarray:
    """A numeric (or timestamp) Arrow array without nulls as a numpy array over its buffer
    (read-only; no copy): the values ``col.to_numpy()`` gives."""
    width = col.type.bit_width // 8
    kind = ("f" if pa.types.is_floating(col.type) else
            "u" if pa.types.is_unsigned_integer(col.type) else "i")
    return np.frombuffer(col.buffers()[1], f"<{kind}{width}", len(col), col.offset * width)


def valid(col: Any) -> np.ndarray:
    """Where an Arrow array is not null (a numpy bool array)."""
    bits = col.buffers()[0]
    if bits is None or not col.null_count:
        return np.ones(len(col), np.bool_)
    every = np.unpackbits(np.frombuffer(bits, np.uint8), count=col.offset + len(col),
                          bitorder="little")
    return every[col.offset:].astype(np.bool_)
