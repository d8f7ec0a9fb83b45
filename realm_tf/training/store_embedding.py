"""Embedding a whole block store with the current doc tower, in process, and indexing it.

Used by the synchronous refresher and wherever an index is built once from a model in memory
(the asynchronous path embeds from a doc-embedder export in the Beam index builder instead).
Legend: N blocks, D embedding dim.
"""
import numpy as np
import tensorflow as tf

from realm_tf.data.block_store import BlockStore
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.mips.scann_index import ScannIndex
from realm_tf.models.retriever import Retriever
from realm_tf.tokenization.bert_packer import BertPacker

INDEX_KINDS = ("scann", "brute_force")


def build_index(embeddings: np.ndarray, kind: str) -> MipsIndex:
  """A MIPS index of `kind` over float32 [N, D] embeddings."""
  if kind == "scann":
    return ScannIndex.build(embeddings)
  if kind == "brute_force":
    return BruteForceIndex(embeddings)
  raise ValueError(f"index kind must be one of {INDEX_KINDS}, got {kind!r}")


def embed_store(retriever: Retriever, store: BlockStore, cls_id: int, sep_id: int, pad_id: int,
                block_length: int = 288, batch_size: int = 64) -> np.ndarray:
  """All blocks through the current doc tower, in store order: float32 [N, D]."""
  packer = BertPacker(block_length, cls_id, sep_id, pad_id)
  embed = tf.function(lambda f: retriever.embed_documents(f, training=False),
                      reduce_retracing=True)
  chunks = []
  for start in range(0, len(store), batch_size):
    titles = tf.cast(store.title_ids[start:start + batch_size], tf.int32)
    bodies = tf.cast(store.body_ids[start:start + batch_size], tf.int32)
    features = packer((titles, bodies))
    longest = tf.reduce_max(tf.reduce_sum(features["input_mask"], axis=1))
    chunks.append(embed({n: t[:, :longest] for n, t in features.items()}).numpy())
  return np.concatenate(chunks, axis=0)
