"""A realm_tf `Retriever` as a benchmark row: a query function and the block embeddings.

Queries are `[CLS] x [SEP]` from `QueryFeaturizer` (at most `query_length` wordpieces) through
`Retriever.embed_query`; blocks go through the doc tower by `training.store_embedding.
embed_store` (packed `[CLS] title [SEP] body [SEP]` from the store's wordpiece ids). Pass both
to `recall.evaluate_retriever`.
Legend: Q questions, N blocks, D projection size.
"""
from typing import Sequence

import numpy as np
import tensorflow as tf

from realm_tf.data.block_store import BlockStore
from realm_tf.evaluation.retrieval_recall import QueryEmbedFn
from realm_tf.tokenization.featurizers import QueryFeaturizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


def query_embed_fn(retriever, tokenizer: WordpieceTokenizer,
                   query_length: int = 64) -> QueryEmbedFn:
  """Q questions -> float32 [Q, D] by `retriever.embed_query` (traced once per batch shape)."""
  featurize = QueryFeaturizer(tokenizer, seq_length=query_length)
  embed = tf.function(lambda f: tf.cast(retriever.embed_query(f, training=False), tf.float32),
                      reduce_retracing=True)

  def embed_questions(questions: Sequence[str]) -> np.ndarray:
    return embed(featurize(tf.constant(list(questions)))).numpy()

  return embed_questions


def doc_embeddings(retriever, store: BlockStore, tokenizer: WordpieceTokenizer,
                   block_length: int = 128, batch_size: int = 64) -> np.ndarray:
  """float32 [N, D]: every block through the retriever's doc tower, in store order."""
  from realm_tf.training.store_embedding import embed_store  # pylint: disable=g-import-not-at-top
  return embed_store(retriever, store, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                     block_length=block_length, batch_size=batch_size)
