"""Exact maximum inner product search: chunked matmul + running top-k, in-graph.

Dimension legend: Q queries, N documents, D embedding dimension, k results, C chunk size.

The N documents are scored C at a time inside a `tf.while_loop`; each chunk's top-k is merged
into a running [Q, k] top-k, so memory is O(Q·C) however large N is (13M × 128 REALM blocks
never produce a [Q, N] score matrix). Ties keep the lower document id first, as a stable
descending sort would. On GPUs with TensorFloat-32 enabled (TF's default), the matmul rounds
its inputs to TF32, so scores are exact only up to that precision.
"""
from typing import Tuple, Union

import numpy as np
import tensorflow as tf

from realm_tf.mips import manifest as manifest_lib
from realm_tf.mips import mips_index

_EMBEDDINGS_FILE = "embeddings.npy"


class BruteForceIndex(mips_index.MipsIndex):
  """Exact search over float32 [N, D] embeddings held in a non-trainable `tf.Variable`.

  Example:
    index = BruteForceIndex(block_emb)                 # [N, D]
    scores, ids = index.search(query_emb, k=8)         # [Q, 8], [Q, 8]
  """
  KIND = "brute_force"

  def __init__(self, embeddings: Union[tf.Tensor, np.ndarray], chunk_size: int = 1 << 18):
    """Creates the index.

    Args:
      embeddings: float32 [N, D] document embeddings, N >= 1.
      chunk_size: C, the number of documents scored per step.

    Raises:
      ValueError: embeddings are not a non-empty [N, D] matrix, or chunk_size < 1.
    """
    embeddings = tf.convert_to_tensor(embeddings, dtype=tf.float32)
    if embeddings.shape.rank != 2 or embeddings.shape[0] < 1 or embeddings.shape[1] < 1:
      raise ValueError(f"embeddings must be a non-empty [N, D] matrix, got {embeddings.shape}")
    if chunk_size < 1:
      raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    self._chunk_size = int(chunk_size)
    self._embeddings = tf.Variable(embeddings, trainable=False, name="mips_embeddings")

  @property
  def num_docs(self) -> int:
    return int(self._embeddings.shape[0])

  @property
  def dim(self) -> int:
    return int(self._embeddings.shape[1])

  @property
  def chunk_size(self) -> int:
    """C, the number of documents scored per step."""
    return self._chunk_size

  @property
  def embeddings(self) -> tf.Variable:
    """The float32 [N, D] document embeddings."""
    return self._embeddings

  def document_embeddings(self) -> np.ndarray:
    return self._embeddings.numpy()

  def _search(self, queries: tf.Tensor, k: int) -> Tuple[tf.Tensor, tf.Tensor]:
    embeddings = tf.convert_to_tensor(self._embeddings)  # [N, D]
    num_docs = self.num_docs
    chunk_size = self._chunk_size
    num_chunks = -(-num_docs // chunk_size)
    num_queries = tf.shape(queries)[0]

    def body(chunk, best_scores, best_ids):
      start = chunk * chunk_size
      size = tf.minimum(chunk_size, num_docs - start)
      chunk_embeddings = tf.slice(embeddings, [start, 0], [size, -1])  # [C, D]
      chunk_scores = tf.matmul(queries, chunk_embeddings, transpose_b=True)  # [Q, C]
      chunk_best, chunk_positions = tf.math.top_k(chunk_scores, k=tf.minimum(k, size))
      chunk_ids = tf.cast(chunk_positions, tf.int64) + tf.cast(start, tf.int64)
      # The running best come first, so equal scores keep the lower id first.
      scores = tf.concat([best_scores, chunk_best], axis=1)  # [Q, k + min(k, C)]
      ids = tf.concat([best_ids, chunk_ids], axis=1)
      best_scores, positions = tf.math.top_k(scores, k=k)  # [Q, k]
      best_ids = tf.gather(ids, positions, batch_dims=1)
      return chunk + 1, best_scores, best_ids

    _, scores, ids = tf.while_loop(
        lambda chunk, *_: chunk < num_chunks, body,
        (tf.constant(0), tf.fill([num_queries, k], float("-inf")),
         tf.fill([num_queries, k], tf.constant(-1, tf.int64))))
    return scores, ids

  def save(self, directory: str) -> None:
    tf.io.gfile.makedirs(directory)
    manifest_lib.save_array(directory, _EMBEDDINGS_FILE, self._embeddings.numpy())
    manifest_lib.IndexManifest.for_files(
        directory, [_EMBEDDINGS_FILE], kind=self.KIND, num_docs=self.num_docs, dim=self.dim,
        builder={"chunk_size": self._chunk_size}).write(directory)

  @classmethod
  def from_directory(cls, directory: str,
                     manifest: manifest_lib.IndexManifest) -> "BruteForceIndex":
    embeddings = manifest.load_array(directory, _EMBEDDINGS_FILE, np.float32,
                                     (manifest.num_docs, manifest.dim))
    return cls(embeddings, chunk_size=manifest.builder_param(directory, "chunk_size", (int,)))
