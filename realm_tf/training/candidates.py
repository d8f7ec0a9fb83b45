"""Host-side candidate construction for REALM pre-training.

Retrieve R blocks from the (possibly stale) index, drop the query's source block (trivial
retrieval) when `exclude_source`, put the null document first when `null_document`, cut to K.
Rows the index could not fill are masked out of the softmax. Then pack, for each (query,
candidate), with the run's `Featurizer` (the one serving uses): the doc-tower input
`[CLS] title [SEP] body [SEP]` (Lb) and the reader input `[CLS] x [SEP] body [SEP]` (Lr); the
null document is the empty block `[CLS] [SEP] [SEP]`.
Legend: B batch, R retrieved, K candidates, Lb block length, Lr reader length.
"""
import dataclasses

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf import graph_functions
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.featurizers import Featurizer


def check_num_candidates(store: Corpus, num_candidates: int, null_document: bool,
                         exclude_source: bool) -> int:
  """R, the blocks retrieved per query for K candidates; raises InputError naming
  `--num_candidates` if the corpus has fewer than R blocks."""
  retrieve = num_candidates - int(null_document) + int(exclude_source)
  if retrieve > len(store):
    most = len(store) + int(null_document) - int(exclude_source)
    raise errors.InputError(errors.describe(
        f"--num_candidates={num_candidates}", f"needs {retrieve} blocks retrieved per query, "
        f"and the corpus {store.source} has only {len(store)}",
        f"Pass --num_candidates={most} or less, or a larger corpus" if most >= 1 else
        "Pass a larger corpus"))
  return retrieve


@dataclasses.dataclass
class Selection:
  rows: np.ndarray  # int64 [B, K], store rows; `null_row` for the null document and padding
  mask: np.ndarray  # bool [B, K], False on padding
  source_retrieved: np.ndarray  # bool [B], the source block was among the R retrieved


class CandidateBuilder:
  """Turns retrieved store rows into packed candidate features.

  Args:
    store: the block corpus the index was built from (same row order).
    featurizer: packs blocks to its Lb (REALM: 288) and reader inputs to its Lr (384).
    num_candidates: K (REALM: 8, null document included).
    null_document: put the empty block first.
    exclude_source: drop the query's source block.
  """

  def __init__(self, store: Corpus, featurizer: Featurizer, num_candidates: int = 8,
               null_document: bool = True, exclude_source: bool = True):
    self.num_to_retrieve = check_num_candidates(store, num_candidates, null_document,
                                                exclude_source)
    self.num_candidates = num_candidates
    self.null_document = null_document
    self.exclude_source = exclude_source
    self.null_row = len(store)  # reads as an empty row of the wordpiece columns
    self._titles, self._bodies = store.wordpieces(featurizer.tokenizer)
    self.featurizer = featurizer

  def select(self, retrieved: np.ndarray, source_rows: np.ndarray) -> Selection:
    """retrieved int64 [B, R] rows (-1: none), source_rows int64 [B] (-1: not in corpus)."""
    batch = retrieved.shape[0]
    rows = np.full([batch, self.num_candidates], self.null_row, np.int64)
    mask = np.zeros([batch, self.num_candidates], bool)
    for b in range(batch):
      kept = [r for r in retrieved[b] if r >= 0 and
              not (self.exclude_source and r == source_rows[b])]
      chosen = ([self.null_row] if self.null_document else []) + kept
      chosen = chosen[:self.num_candidates]
      rows[b, :len(chosen)] = chosen
      mask[b, :len(chosen)] = True
    source_retrieved = np.array([s >= 0 and s in r for s, r in zip(source_rows, retrieved)])
    return Selection(rows, mask, source_retrieved)

  def features(self, rows, query_ids: tf.RaggedTensor):
    """Packs candidates; their wordpieces are read from the corpus columns by row (the
    memory-mapped corpus is never loaded whole).

    Args:
      rows: int64 [B, K] from `select`.
      query_ids: RaggedTensor [B, (T)] of the (masked) query wordpieces, no specials.

    Returns:
      ({name: [B, K, Lb]} doc-tower features, {name: [B, K, Lr]} reader features).
    """
    flat = np.asarray(rows, np.int64).reshape([-1])
    return self._pack(tf.constant(np.shape(rows), tf.int32), self._titles.gather(flat),
                      self._bodies.gather(flat), query_ids)

  @graph_functions.function(reduce_retracing=True)
  def _pack(self, shape: tf.Tensor, titles: tf.RaggedTensor, bodies: tf.RaggedTensor,
            query_ids: tf.RaggedTensor):
    batch, k = shape[0], shape[1]
    queries = tf.gather(query_ids, tf.repeat(tf.range(batch), k))
    unflatten = lambda t: tf.reshape(t, tf.concat([[batch, k], tf.shape(t)[1:]], 0))
    docs = {n: unflatten(t) for n, t in self.featurizer.pack_blocks(titles, bodies).items()}
    reader = {n: unflatten(t) for n, t in self.featurizer.reader(queries, bodies).items()
              if n != "block_mask"}
    return docs, reader
