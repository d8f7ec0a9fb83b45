"""BM25 over block texts with `bm25s`: the sparse baseline of the demo and the real-data
benchmark.

A block's text is its title and body; `bm25s.tokenize` with its defaults (lower-cased
scikit-learn word pattern `(?u)\\b\\w\\w+\\b`, no stemmer) drops English stopwords from blocks
and questions alike, and scoring is bm25s' default (Lucene BM25, k1 = 1.5, b = 0.75). A block
sharing no term with the question scores 0 and is not retrieved (row -1), as Lucene would not
return it.
Legend: Q questions, N blocks, K retrieved blocks per question (best first).
"""
from typing import Sequence, Tuple

import bm25s
import numpy as np

from realm_tf.retrieval.corpus import Corpus

STOPWORDS = "en"


def block_texts(store: Corpus) -> list:
  """[N] strings "title\\nbody", what BM25 indexes."""
  return [f"{title}\n{text}" for title, text in zip(store.titles, store.texts)]


class Bm25Index:
  """A BM25 index of N texts.

  Args:
    texts: [N] documents (see `block_texts`).
  """

  def __init__(self, texts: Sequence[str]):
    if not texts:
      raise ValueError("BM25 needs at least one document")
    self.num_docs = len(texts)
    self._bm25 = bm25s.BM25()
    self._bm25.index(bm25s.tokenize(list(texts), stopwords=STOPWORDS, show_progress=False),
                     show_progress=False)

  @classmethod
  def from_store(cls, store: Corpus) -> "Bm25Index":
    return cls(block_texts(store))

  def search(self, queries: Sequence[str], k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The top k documents of each query.

    Returns:
      (rows int64 [Q, k], scores float32 [Q, k]) by descending score; rows of documents that
      share no term with the query are -1 (score 0).
    """
    if not 1 <= k <= self.num_docs:
      raise ValueError(f"k={k} outside 1..N={self.num_docs}")
    if not queries:
      return np.zeros([0, k], np.int64), np.zeros([0, k], np.float32)
    tokens = bm25s.tokenize(list(queries), stopwords=STOPWORDS, return_ids=False,
                            show_progress=False)
    rows, scores = self._bm25.retrieve(tokens, k=k, show_progress=False, n_threads=1)
    rows, scores = np.asarray(rows, np.int64), np.asarray(scores, np.float32)
    return np.where(scores > 0, rows, -1), scores
