"""All blocks of a corpus in canonical order (ascending block id), held in memory.

Row r of a `BlockStore` is row r of every block-embedding matrix and MIPS index built from it;
`fingerprint` (`retrieval.fingerprint.corpus_fingerprint`) identifies those blocks in that order
so an index can be checked against its corpus.
Legend: N blocks, T wordpieces.
"""
import dataclasses
import functools
from typing import List, Sequence

import numpy as np
import tensorflow as tf

from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.retrieval.fingerprint import corpus_fingerprint


def _ragged(rows: Sequence[Sequence[int]]) -> tf.RaggedTensor:
  lengths = np.array([len(r) for r in rows], np.int64)
  values = (np.concatenate([np.asarray(r, np.int64) for r in rows]) if lengths.sum()
            else np.zeros([0], np.int64))
  return tf.RaggedTensor.from_row_lengths(values, lengths)


@dataclasses.dataclass
class BlockStore:
  """Blocks as parallel arrays in ascending `block_ids` order.

  Attributes:
    block_ids: int64 [N], strictly increasing.
    titles, texts: N UTF-8 strings each.
    title_ids, body_ids: int64 RaggedTensors [N, (T)] of wordpieces without specials.
  """
  block_ids: np.ndarray
  titles: List[str]
  texts: List[str]
  title_ids: tf.RaggedTensor
  body_ids: tf.RaggedTensor

  def __post_init__(self):
    n = len(self.block_ids)
    if not (len(self.titles) == len(self.texts) == int(self.title_ids.nrows()) ==
            int(self.body_ids.nrows()) == n):
      raise ValueError("BlockStore fields have different numbers of rows")
    if n and np.any(np.diff(self.block_ids) <= 0):
      raise ValueError("BlockStore block_ids must be strictly increasing (canonical order)")

  def __len__(self) -> int:
    return len(self.block_ids)

  @functools.cached_property
  def fingerprint(self) -> str:
    """`retrieval.fingerprint.corpus_fingerprint` of the ids, titles and texts (computed once)."""
    return corpus_fingerprint(self.block_ids, self.titles, self.texts)

  def rows(self, block_ids) -> np.ndarray:
    """Rows of `block_ids` (int64 array); raises KeyError naming any unknown id."""
    block_ids = np.asarray(block_ids, np.int64)
    rows = np.searchsorted(self.block_ids, block_ids)
    rows = np.minimum(rows, len(self.block_ids) - 1)
    unknown = block_ids[self.block_ids[rows] != block_ids]
    if unknown.size:
      raise KeyError(f"block ids not in the corpus: {unknown[:10].tolist()}")
    return rows

  @classmethod
  def from_blocks(cls, block_ids: Sequence[int], titles: Sequence[str], texts: Sequence[str],
                  title_ids: Sequence[Sequence[int]],
                  body_ids: Sequence[Sequence[int]]) -> "BlockStore":
    """Builds a store from unordered blocks; duplicate ids are an error."""
    order = np.argsort(np.asarray(block_ids, np.int64), kind="stable")
    ids = np.asarray(block_ids, np.int64)[order]
    if len(ids) > 1 and np.any(np.diff(ids) == 0):
      raise ValueError(f"duplicate block ids: {ids[1:][np.diff(ids) == 0][:10].tolist()}")
    pick = lambda seq: [seq[i] for i in order]
    return cls(ids, pick(list(titles)), pick(list(texts)), _ragged(pick(list(title_ids))),
               _ragged(pick(list(body_ids))))

  @classmethod
  def load(cls, corpus_dir: str) -> "BlockStore":
    """Reads every `blocks-*.tfrecord` shard of `corpus_dir`, verified by
    `shards.check_shards` (against `blocks.manifest.json` where there is one).

    Raises:
      FileNotFoundError: no such directory, or no shards in it.
      InputError: a missing, damaged or miscounted shard, named with expected vs found.
    """
    files = shards.check_shards(corpus_dir, "blocks").files
    ids, titles, texts, title_ids, body_ids = [], [], [], [], []
    for record in tf.data.TFRecordDataset(files).map(formats.parse_block):
      ids.append(int(record["block_id"]))
      titles.append(record["title"].numpy().decode("utf-8"))
      texts.append(record["text"].numpy().decode("utf-8"))
      title_ids.append(record["title_ids"].numpy())
      body_ids.append(record["body_ids"].numpy())
    return cls.from_blocks(ids, titles, texts, title_ids, body_ids)
