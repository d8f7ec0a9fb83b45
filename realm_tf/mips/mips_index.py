"""The maximum inner product search interface, and `load_index` for any saved index.

Dimension legend: Q queries, N documents, D embedding dimension, k results per query.

Every index returns the k documents with the largest inner product <query, doc>, best first,
as TF ops, so `search` runs eagerly and inside a `tf.function`. Building and loading are eager.
"""
import abc
from typing import Callable, Tuple, Union

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

    `load_index` is the entry point; it checks the manifest and checksums first.

    Raises:
      IndexCorruptedError: a stored array disagrees with the manifest.
    """


def load_index(directory: str, verify_checksums: bool = True) -> MipsIndex:
  """Loads the index saved in `directory` by any `MipsIndex.save`.

  Reads `manifest.json`, recomputes every file's sha256 (unless `verify_checksums` is False:
  for an index its publisher verified already), and dispatches on the manifest's kind to the
  implementation, which checks the stored shapes against num_docs and dim.

  Args:
    directory: a directory written by `save` (local path or any `tf.io.gfile` URL).
    verify_checksums: recompute the files' sha256 (the whole index is read once more).

  Returns:
    The index, a `BruteForceIndex`, a `ScannIndex` or a `ShardedIndex` of either (whose
    shards' checksums `verify_checksums` covers too).

  Raises:
    IndexCorruptedError: the manifest is missing or invalid, a file is missing or fails its
      checksum, or the stored arrays disagree with the manifest.
  """
  # The implementations import this module, so they are imported when first needed.
  from realm_tf.mips import brute_force_index  # pylint: disable=g-import-not-at-top
  from realm_tf.mips import scann_index  # pylint: disable=g-import-not-at-top
  from realm_tf.mips import sharded_index  # pylint: disable=g-import-not-at-top
  implementations = {cls.KIND: cls for cls in (brute_force_index.BruteForceIndex,
                                                scann_index.ScannIndex)}
  manifest = manifest_lib.IndexManifest.read(directory)
  manifest.verify(directory, checksums=verify_checksums)
  if manifest.kind == sharded_index.ShardedIndex.KIND:  # its shards are indexes of their own
    return sharded_index.ShardedIndex.from_directory(directory, manifest, verify_checksums)
  return implementations[manifest.kind].from_directory(directory, manifest)


def check_index(directory: str, check: Callable[[MipsIndex, str], None]) -> None:
  """Loads the index in `directory` (checksums verified) and calls `check(index, directory)`;
  a `ShardedIndex` shard by shard, each dropped before the next is loaded, so that verifying
  an index written shard by shard never needs all of it in memory.

  Raises:
    IndexCorruptedError: as `load_index`.
  """
  from realm_tf.mips import sharded_index  # pylint: disable=g-import-not-at-top
  manifest = manifest_lib.IndexManifest.read(directory)
  if manifest.kind == sharded_index.ShardedIndex.KIND:
    sharded_index.ShardedIndex.check_shards(directory, manifest, check)
  else:
    check(load_index(directory), directory)
