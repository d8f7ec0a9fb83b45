"""Embedding a whole block store with the current doc tower, in process, and indexing it.

Used by the synchronous refresher and wherever an index is built once from a model in memory
(the asynchronous path embeds from a doc-embedder export in the Beam index builder instead).
Legend: N blocks, D embedding dim.
"""
import numpy as np
import tensorflow as tf

from realm_tf.data.block_store import BlockStore
from realm_tf.models.precision import with_compute_dtype
from realm_tf.models.retriever import Retriever
from realm_tf.tokenization.bert_packer import BertPacker
from realm_tf.tokenization.bert_packer import padded_length

class StoreEmbedder:
  """A retriever's doc tower over whole block stores, traced once: `embed(store)` -> float32
  [N, D] in store order, with the tower's current weights (callers that embed repeatedly, such
  as the synchronous refresher, keep one instead of re-tracing per call).

  Length bucketing: blocks are embedded shortest first and each batch is padded only to its
  longest block, rounded up to a multiple of `bucket` (few distinct shapes to trace). Blocks
  of short articles (and each article's last block) are far below 288 wordpieces, so this does
  a fraction of the fixed-length work (bench/embedding_bench.py: 2.1-2.6× blocks/s on
  Wikipedia lead extracts, which average 108 wordpieces).
  `compute_dtype="bfloat16"` embeds with a bfloat16 copy of the doc tower
  (`models.precision`), several times faster where the hardware has bfloat16 matmuls; the copy
  takes the retriever's weights at every call.
  `jit_compile=True` XLA-compiles the forward, once per bucket length and batch size; the last
  batch is padded to `batch_size` rows so that there is one batch size.
  """

  def __init__(self, retriever: Retriever, cls_id: int, sep_id: int, pad_id: int,
               block_length: int = 288, batch_size: int = 64, bucket: int = 32,
               compute_dtype: str = "float32", jit_compile: bool = False):
    self.retriever = retriever
    self.block_length, self.batch_size, self.bucket = block_length, batch_size, bucket
    self.jit_compile = jit_compile
    self._packer = BertPacker(block_length, cls_id, sep_id, pad_id)
    self._embedder = with_compute_dtype(retriever, compute_dtype)
    embedder = self._embedder
    self._embed = tf.function(
        lambda f: tf.cast(embedder.embed_documents(f, training=False), tf.float32),
        reduce_retracing=True, jit_compile=jit_compile)

  def __call__(self, store: BlockStore) -> np.ndarray:
    if self._embedder is not self.retriever:
      self._embedder.set_weights(self.retriever.get_weights())
    lengths = (store.title_ids.row_lengths() + store.body_ids.row_lengths()).numpy() + 3
    order = np.argsort(lengths, kind="stable")
    embeddings = np.zeros([len(store), self.retriever.projection_size], np.float32)
    for start in range(0, len(store), self.batch_size):
      rows = order[start:start + self.batch_size]
      titles = tf.cast(tf.gather(store.title_ids, rows), tf.int32)
      bodies = tf.cast(tf.gather(store.body_ids, rows), tf.int32)
      length = padded_length(int(lengths[rows].max()), self.bucket, self.block_length)
      features = {n: t[:, :length] for n, t in self._packer((titles, bodies)).items()}
      if self.jit_compile and len(rows) < self.batch_size:
        features = {n: tf.pad(t, [[0, self.batch_size - len(rows)], [0, 0]])
                    for n, t in features.items()}
      embeddings[rows] = self._embed(features).numpy()[:len(rows)]
    return embeddings


def embed_store(retriever: Retriever, store: BlockStore, cls_id: int, sep_id: int, pad_id: int,
                block_length: int = 288, batch_size: int = 64, bucket: int = 32,
                compute_dtype: str = "float32", jit_compile: bool = False) -> np.ndarray:
  """All blocks through the current doc tower, once: float32 [N, D] in store order (see
  `StoreEmbedder`)."""
  return StoreEmbedder(retriever, cls_id, sep_id, pad_id, block_length, batch_size, bucket,
                       compute_dtype, jit_compile)(store)
