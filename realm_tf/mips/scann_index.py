"""Approximate maximum inner product search with ScaNN's TensorFlow ops.

Dimension legend: Q queries, N documents, D embedding dimension, k results, L tree leaves.

The searcher is a ScaNN TF resource, so `search` is a TF op (CPU kernel) that runs eagerly and
inside a `tf.function`. Configuration (the ScaNN recipe for dot-product search):
- N >= `MIN_DOCS_FOR_PARTITIONING` (or an explicit `num_leaves` > 1): a k-means tree of
  L ≈ sqrt(N) leaves, anisotropic asymmetric hashing (`score_ah`) inside the searched leaves,
  and exact float32 re-scoring of the best `reorder_k` candidates;
- smaller N: ScaNN's exact float32 brute-force scoring (a tree would not pay off).

`save` writes the searcher's state, as exported by ScaNN's `scann_to_tensors` op, one file per
tensor (`.npy` arrays, raw `.pb` bytes for the serialized protos), and `load_index` rebuilds an
identical searcher from them with `tensors_to_scann`.
"""
import math
import uuid
import weakref
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
import tensorflow as tf
from scann.scann_ops.py import scann_ops

from realm_tf.mips import manifest as manifest_lib
from realm_tf.mips import mips_index

MIN_DOCS_FOR_PARTITIONING = 10_000
_LEAVES_TO_SEARCH_FRACTION = 0.05
# ScaNN's exported state (the outputs of `scann_to_tensors`): serialized protos as strings,
# and arrays with their dtypes, the [N, D] float32 dataset first.
_STRING_ASSETS = ("scann_config", "serialized_partitioner", "ah_codebook")
_ARRAY_ASSETS = {
    "dataset": np.float32,
    "datapoint_to_token": np.int32,
    "hashed_dataset": np.uint8,
    "int8_dataset": np.int8,
    "int8_multipliers": np.float32,
    "dp_norms": np.float32,
}


def _asset_file(name: str) -> str:
  return f"{name}.pb" if name in _STRING_ASSETS else f"{name}.npy"


# Searchers collected while a graph was being built, destroyed at the next eager collection.
_PENDING_DESTRUCTION = []


def _destroy_searcher(handle: tf.Tensor) -> None:
  # Garbage collection may run this in the middle of building a graph (a tf.function trace, a
  # SavedModel load): the op must run eagerly, never land in (and capture into) that graph.
  with tf.init_scope():
    if not tf.executing_eagerly():
      _PENDING_DESTRUCTION.append(handle)
      return
    while _PENDING_DESTRUCTION:
      tf.raw_ops.DestroyResourceOp(resource=_PENDING_DESTRUCTION.pop(), ignore_lookup_error=True)
    tf.raw_ops.DestroyResourceOp(resource=handle, ignore_lookup_error=True)


class ScannIndex(mips_index.MipsIndex):
  """ScaNN approximate search over float32 [N, D] embeddings.

  Create with `ScannIndex.build(embeddings, ...)` or `load_index(directory)`. The ScaNN
  resource is destroyed when the index is garbage-collected.

  Example:
    index = ScannIndex.build(block_emb)                # [N, D]
    scores, ids = index.search(query_emb, k=8)         # [Q, 8], [Q, 8]
  """
  KIND = "scann"

  def __init__(self, searcher_handle: tf.Tensor, num_docs: int, dim: int,
               builder: Dict[str, Any]):
    """Wraps an existing ScaNN searcher; use `build` or `load_index` instead.

    Args:
      searcher_handle: the ScaNN TF resource handle; the index takes ownership.
      num_docs: N.
      dim: D.
      builder: the resolved build parameters (see `build`).
    """
    self._searcher = scann_ops.ScannSearcher(searcher_handle)
    self._num_docs = int(num_docs)
    self._dim = int(dim)
    self._builder = dict(builder)
    finalizer = weakref.finalize(self, _destroy_searcher, searcher_handle)
    finalizer.atexit = False

  @classmethod
  def build(cls,
            embeddings: Union[tf.Tensor, np.ndarray],
            num_neighbors: int = 8,
            num_leaves: Optional[int] = None,
            num_leaves_to_search: Optional[int] = None,
            training_sample_size: int = 250_000,
            anisotropic_quantization_threshold: float = 0.2,
            reorder_k: int = 100,
            dimensions_per_block: int = 2) -> "ScannIndex":
    """Trains a ScaNN searcher on the embeddings.

    Args:
      embeddings: float32 [N, D] document embeddings, N >= 1.
      num_neighbors: ScaNN's default k (each `search` call passes its own k).
      num_leaves: L, the number of k-means tree leaves; 1 disables the tree (exact brute
        force). None: round(sqrt(N)) when N >= MIN_DOCS_FOR_PARTITIONING, else 1.
      num_leaves_to_search: leaves probed per query; None: ceil(L / 20), at least 1.
      training_sample_size: documents sampled to train the tree and the hash codebooks
        (capped at N).
      anisotropic_quantization_threshold: the score-aware quantization threshold of the
        asymmetric hashing (ScaNN recommends 0.2 for dot product).
      reorder_k: candidates re-scored exactly per query (at least k at search time).
      dimensions_per_block: dimensions per asymmetric-hashing block.

    Returns:
      The index.

    Raises:
      ValueError: embeddings are not a non-empty [N, D] matrix or a parameter is out of range.
    """
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    if embeddings.ndim != 2 or embeddings.shape[0] < 1 or embeddings.shape[1] < 1:
      raise ValueError(f"embeddings must be a non-empty [N, D] matrix, got {embeddings.shape}")
    num_docs, dim = embeddings.shape
    if num_leaves is None:
      num_leaves = (round(math.sqrt(num_docs)) if num_docs >= MIN_DOCS_FOR_PARTITIONING else 1)
    if not 1 <= num_leaves <= num_docs:
      raise ValueError(f"num_leaves={num_leaves} must be in [1, num_docs={num_docs}]")
    partitioned = num_leaves > 1
    if partitioned and num_leaves_to_search is None:
      num_leaves_to_search = max(1, math.ceil(num_leaves * _LEAVES_TO_SEARCH_FRACTION))
    if partitioned and not 1 <= num_leaves_to_search <= num_leaves:
      raise ValueError(f"num_leaves_to_search={num_leaves_to_search} must be in "
                       f"[1, num_leaves={num_leaves}]")
    if reorder_k < num_neighbors:
      raise ValueError(f"reorder_k={reorder_k} must be >= num_neighbors={num_neighbors}")
    builder = {
        "num_neighbors": num_neighbors,
        "num_leaves": num_leaves,
        "num_leaves_to_search": num_leaves_to_search if partitioned else None,
        "training_sample_size": min(training_sample_size, num_docs),
        "anisotropic_quantization_threshold": anisotropic_quantization_threshold,
        "reorder_k": reorder_k,
        "dimensions_per_block": dimensions_per_block,
    }
    config = scann_ops.builder(embeddings, num_neighbors, "dot_product")
    if partitioned:
      config = config.tree(
          num_leaves=num_leaves, num_leaves_to_search=num_leaves_to_search,
          training_sample_size=builder["training_sample_size"]).score_ah(
              dimensions_per_block,
              anisotropic_quantization_threshold=anisotropic_quantization_threshold,
              training_sample_size=builder["training_sample_size"]).reorder(reorder_k)
    else:
      config = config.score_brute_force()
    return cls(config.build().searcher_handle, num_docs, dim, builder)

  @property
  def num_docs(self) -> int:
    return self._num_docs

  @property
  def dim(self) -> int:
    return self._dim

  @property
  def builder(self) -> Dict[str, Any]:
    """The resolved build parameters, as recorded in the manifest."""
    return dict(self._builder)

  def _search(self, queries: tf.Tensor, k: int) -> Tuple[tf.Tensor, tf.Tensor]:
    partitioned = self._builder["num_leaves"] > 1
    ids, scores = self._searcher.search_batched_parallel(
        queries, final_num_neighbors=k,
        pre_reorder_num_neighbors=max(k, self._builder["reorder_k"]) if partitioned else None)
    # ScaNN returns [Q, min(k, most found)], padding short rows with id 0 and score NaN.
    found = tf.logical_not(tf.math.is_nan(scores))
    scores = tf.where(found, scores, float("-inf"))
    ids = tf.where(found, tf.cast(ids, tf.int64), tf.constant(-1, tf.int64))
    padding = [[0, 0], [0, k - tf.shape(scores)[1]]]
    scores = tf.pad(scores, padding, constant_values=float("-inf"))
    ids = tf.pad(ids, padding, constant_values=-1)
    return tf.ensure_shape(scores, [None, k]), tf.ensure_shape(ids, [None, k])

  def document_embeddings(self) -> np.ndarray:
    """The searcher's float32 [N, D] dataset: the embeddings it was built from, in row order
    (ScaNN re-scores with them exactly)."""
    return scann_ops.scann_to_tensors(self._searcher.searcher_handle).dataset.numpy()

  def save(self, directory: str) -> None:
    tf.io.gfile.makedirs(directory)
    tensors = scann_ops.scann_to_tensors(self._searcher.searcher_handle)
    file_names = []
    for name in _STRING_ASSETS:
      value = getattr(tensors, name)
      # A rank-0 string is ScaNN's placeholder for an absent part (e.g. no tree).
      if value.shape.rank == 1:
        manifest_lib.save_bytes(directory, _asset_file(name), value.numpy()[0])
        file_names.append(_asset_file(name))
    for name in _ARRAY_ASSETS:
      manifest_lib.save_array(directory, _asset_file(name), getattr(tensors, name).numpy())
      file_names.append(_asset_file(name))
    manifest_lib.IndexManifest.for_files(
        directory, file_names, kind=self.KIND, num_docs=self.num_docs, dim=self.dim,
        builder=self._builder).write(directory)

  @classmethod
  def from_directory(cls, directory: str,
                     manifest: manifest_lib.IndexManifest) -> "ScannIndex":
    num_docs, dim = manifest.num_docs, manifest.dim
    shapes = {"dataset": (num_docs, dim)}
    tensors = {}
    for name in _STRING_ASSETS:
      tensors[name] = (tf.constant([manifest.load_bytes(directory, _asset_file(name))])
                       if _asset_file(name) in manifest.files else tf.constant(b""))
    for name, dtype in _ARRAY_ASSETS.items():
      array = manifest.load_array(directory, _asset_file(name), dtype, shapes.get(name))
      if name in ("datapoint_to_token", "hashed_dataset") and array.ndim and (
          array.shape[0] != num_docs):
        raise manifest_lib.IndexCorruptedError(
            directory, _asset_file(name),
            f"has {array.shape[0]} rows, manifest.json says num_docs={num_docs}")
      tensors[name] = tf.constant(array)
    builder = {
        name: manifest.builder_param(directory, name, types) for name, types in (
            ("num_neighbors", (int,)), ("num_leaves", (int,)),
            ("num_leaves_to_search", (int, type(None))), ("training_sample_size", (int,)),
            ("anisotropic_quantization_threshold", (int, float)), ("reorder_k", (int,)),
            ("dimensions_per_block", (int,)))
    }
    handle = scann_ops.tensors_to_scann(x=tensors.pop("dataset"), **tensors,
                                        shared_name=f"scann-{uuid.uuid4()}")
    return cls(handle, num_docs, dim, builder)
