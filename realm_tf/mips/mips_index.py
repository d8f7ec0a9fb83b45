"""The maximum inner product search interface (`index_loading.load_index` loads any saved one).

Dimension legend: Q queries, N documents, D embedding dimension, k results per query.

Every index returns the k documents with the largest inner product <query, doc>, best first,
as TF ops, so `search` runs eagerly and inside a `tf.function`. Building and loading are eager.
"""
import abc
from typing import Tuple, Union

import numpy as np
import tensorflow as tf

from realm_tf.mips import manifest as manifest_lib


class MipsIndex(abc.ABC):
  """A maximum inner product search index over N document embeddings of dimension D.

  Implementations: `BruteForceIndex` (exact, the oracle and fallback) and `ScannIndex`
  (approximate). Save with `save(directory)`, reload with `load_index(directory)`.
  """

  @property
  @abc.abstractmethod
  def num_docs(self) -> int:
    """N, the number of indexed documents."""

  @property
  @abc.abstractmethod
  def dim(self) -> int:
    """D, the embedding dimension."""

  def search(self, queries: Union[tf.Tensor, np.ndarray],
             k: int) -> Tuple[tf.Tensor, tf.Tensor]:
    """Returns the k documents with the largest inner product with each query.

    Args:
      queries: float32 [Q, D] query embeddings.
      k: the number of results per query, 1 <= k <= N (a Python int).

    Returns:
      scores: float32 [Q, k] inner products, descending along k.
      ids: int64 [Q, k] row indices into the indexed embeddings. An approximate index may
        find fewer than k documents for a query (its searched partitions hold fewer); those
        trailing slots hold id -1 and score -inf.

    Raises:
      ValueError: k is out of range, or queries are not [Q, D].
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
      raise ValueError(f"k must be a Python int, got {k!r}")
    if not 1 <= k <= self.num_docs:
      raise ValueError(f"k={k} is out of range: the index holds num_docs={self.num_docs} "
                       "documents and k must be in [1, num_docs]")
    queries = tf.convert_to_tensor(queries, dtype=tf.float32)
    if queries.shape.rank is not None and queries.shape.rank != 2:
      raise ValueError(f"queries must be [Q, D], got shape {queries.shape}")
    query_dim = queries.shape[-1] if queries.shape.rank is not None else None
    if query_dim is not None and query_dim != self.dim:
      raise ValueError(f"query dim {query_dim} does not match index dim {self.dim}")
    return self._search(tf.ensure_shape(queries, [None, self.dim]), int(k))

  @abc.abstractmethod
  def _search(self, queries: tf.Tensor, k: int) -> Tuple[tf.Tensor, tf.Tensor]:
    """`search` after argument checks: queries float32 [Q, D], 1 <= k <= N."""

  @abc.abstractmethod
  def document_embeddings(self) -> np.ndarray:
    """The indexed float32 [N, D] embeddings, row r = document r (a copy)."""

  @abc.abstractmethod
  def save(self, directory: str) -> None:
    """Writes the index files and then `manifest.json` into `directory` (created if absent)."""

  @classmethod
  @abc.abstractmethod
  def from_directory(cls, directory: str,
                     manifest: manifest_lib.IndexManifest) -> "MipsIndex":
    """Rebuilds the index from `directory`, whose `manifest` has been read and verified.

    `index_loading.load_index` is the entry point; it checks the manifest and checksums first.

    Raises:
      IndexCorruptedError: a stored array disagrees with the manifest.
    """

