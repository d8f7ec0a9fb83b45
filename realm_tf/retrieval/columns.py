"""Ragged columns of a corpus: one flat array of values and int64 row offsets [N + 1].

A column is the on-disk form of N variable-length rows (a block's wordpieces, its title or
text as UTF-8): row r is `values[offsets[r]:offsets[r + 1]]`. Both arrays may be numpy
memmaps (`np.load(..., mmap_mode="r")`), so opening a column costs O(1) time and memory and a
row read touches only its own pages: this is what lets 13.3M blocks be served from a machine
that cannot hold them. Legend: N rows, R rows asked for, T values.
"""
from typing import Iterator, Sequence, Union

import numpy as np
import tensorflow as tf

Rows = Union[Sequence[int], np.ndarray]


class RaggedColumn:
  """N rows of integers: `values` [T] (uint16 / int32 / int64) and `offsets` int64 [N + 1].

  Row indices equal to N (one past the last row) read as an empty row: the candidate builder's
  null document and padding use that row.
  """

  def __init__(self, values: np.ndarray, offsets: np.ndarray):
    if offsets.ndim != 1 or not len(offsets):
      raise ValueError(f"offsets must be a non-empty 1-D array, got shape {offsets.shape}")
    self.values, self.offsets = values, offsets

  @classmethod
  def from_rows(cls, rows: Sequence[Sequence[int]], dtype=np.int64) -> "RaggedColumn":
    """An in-memory column of `rows`."""
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = (np.concatenate([np.asarray(r, dtype) for r in rows]) if offsets[-1]
              else np.zeros([0], dtype))
    return cls(values, offsets)

  @classmethod
  def from_ragged(cls, ragged: Union[tf.RaggedTensor, "RaggedColumn"]) -> "RaggedColumn":
    """The column of a RaggedTensor [N, (T)] (a column is returned as it is)."""
    if isinstance(ragged, RaggedColumn):
      return ragged
    return cls(ragged.flat_values.numpy(), ragged.row_splits.numpy().astype(np.int64))

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def nrows(self) -> int:
    return len(self)

  def row_lengths(self) -> np.ndarray:
    """int64 [N]."""
    return np.diff(self.offsets)

  def row(self, r: int) -> np.ndarray:
    """Row r's values ([] for r == N)."""
    if r == len(self):
      return self.values[:0]
    return self.values[self.offsets[r]:self.offsets[r + 1]]

  def gather(self, rows: Rows) -> tf.RaggedTensor:
    """int64 RaggedTensor [R, (T)] of `rows` (an index equal to N reads as empty)."""
    rows = np.asarray(rows, np.int64).reshape([-1])
    starts = self.offsets[np.minimum(rows, len(self))]
    ends = np.where(rows < len(self), self.offsets[np.minimum(rows + 1, len(self))], starts)
    lengths = ends - starts
    if lengths.sum():
      values = np.concatenate([self.values[s:e] for s, e in zip(starts, ends)])
    else:
      values = np.zeros([0], self.values.dtype)
    return tf.RaggedTensor.from_row_lengths(values.astype(np.int64), lengths, validate=False)

  def __getitem__(self, rows: slice) -> "RaggedColumn":
    """Rows `rows` (a slice with step 1) as a column sharing the values."""
    start, stop, step = rows.indices(len(self))
    if step != 1:
      raise ValueError("a column slice must have step 1")
    stop = max(start, stop)
    offsets = np.asarray(self.offsets[start:stop + 1], np.int64)
    base = int(offsets[0])
    return RaggedColumn(self.values[base:int(offsets[-1])], offsets - base)

  def ragged(self) -> tf.RaggedTensor:
    """The whole column as an int64 RaggedTensor [N, (T)] (small columns only)."""
    return tf.RaggedTensor.from_row_splits(np.asarray(self.values, np.int64),
                                           np.asarray(self.offsets), validate=False)

  def to_list(self):
    """The rows as Python lists of ints (small columns only)."""
    return self.ragged().to_list()


class StringColumn(Sequence):
  """N UTF-8 strings: `values` uint8 [bytes] and `offsets` int64 [N + 1]; a Sequence of str.

  Indexing by an int gives a str; by a slice, a list of str. Iteration streams the rows.
  """

  def __init__(self, values: np.ndarray, offsets: np.ndarray):
    self.values, self.offsets = values, offsets

  @classmethod
  def from_strings(cls, strings: Sequence[str]) -> "StringColumn":
    """An in-memory column of `strings`."""
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros([len(encoded) + 1], np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return cls(np.frombuffer(b"".join(encoded), np.uint8), offsets)

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def raw(self, r: int) -> bytes:
    """Row r as UTF-8 bytes."""
    return self.values[self.offsets[r]:self.offsets[r + 1]].tobytes()

  def __getitem__(self, index):
    if isinstance(index, slice):
      return [self[r] for r in range(*index.indices(len(self)))]
    r = int(index)
    if r < 0:
      r += len(self)
    if not 0 <= r < len(self):
      raise IndexError(f"row {index} of a column of {len(self)}")
    return self.raw(r).decode("utf-8")

  def __iter__(self) -> Iterator[str]:
    for r in range(len(self)):
      yield self.raw(r).decode("utf-8")

  def __eq__(self, other) -> bool:
    return isinstance(other, (list, tuple, StringColumn)) and len(other) == len(self) and all(
        a == b for a, b in zip(self, other))

  __hash__ = None
