"""The REALM neural knowledge retriever p(z|x) ∝ exp(Embed_input(x) · Embed_doc(z))."""
from typing import Dict, Optional

import tensorflow as tf

from realm_tf.keras import keras
from realm_tf.layers.embedding_projection import EmbeddingProjection

Features = Dict[str, tf.Tensor]  # input_word_ids, input_mask, input_type_ids


def _flatten_candidates(features: Features):
  """[B, K, L] features -> ([B*K, L] features, B, K)."""
  ids = features["input_word_ids"]
  batch, num_candidates = tf.shape(ids)[0], tf.shape(ids)[1]
  flat = {name: tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
          for name, t in features.items()}
  return flat, batch, num_candidates


def _dummy_features(length: int = 2) -> Features:
  ones = tf.ones([1, length], tf.int32)
  return dict(input_word_ids=ones, input_mask=ones, input_type_ids=0 * ones)


@keras.utils.register_keras_serializable(package="realm_tf")
class Retriever(keras.Model):
  """Query and document towers: BERT pooled output -> Dense(D) -> LayerNorm.

  With `doc_encoder=None` the towers share every weight (BERT and projection), as the released
  REALM embedder does; otherwise each tower has its own BERT and projection.

  Args:
    query_encoder: a Model Garden BERT encoder (dict in -> dict with "pooled_output").
    doc_encoder: the document tower's encoder, or None to share the query tower.
    projection_size: D (REALM: 128).
    layer_norm_epsilon: epsilon of the projection LayerNorm.
  """

  def __init__(self, query_encoder: keras.layers.Layer,
               doc_encoder: Optional[keras.layers.Layer] = None, projection_size: int = 128,
               layer_norm_epsilon: float = 1e-12, **kwargs):
    super().__init__(**kwargs)
    self.query_encoder = query_encoder
    self._separate_doc_encoder = doc_encoder
    self.doc_encoder = doc_encoder if doc_encoder is not None else query_encoder
    self.projection_size = projection_size
    self.layer_norm_epsilon = layer_norm_epsilon
    self.query_projection = EmbeddingProjection(projection_size, layer_norm_epsilon,
                                                name="query_projection")
    self.doc_projection = (
        self.query_projection if doc_encoder is None else
        EmbeddingProjection(projection_size, layer_norm_epsilon, name="doc_projection"))

  @property
  def share_towers(self) -> bool:
    return self._separate_doc_encoder is None

  @property
  def checkpoint_items(self):
    """Sub-objects for `tf.train.Checkpoint` (Model Garden convention)."""
    items = dict(query_encoder=self.query_encoder, query_projection=self.query_projection)
    if not self.share_towers:
      items.update(doc_encoder=self.doc_encoder, doc_projection=self.doc_projection)
    return items

  def build(self, input_shape=None):
    """Creates every variable with a dummy pass through both towers; the attention layers
    build lazily, and SavedModel revival restores only variables that exist."""
    dummy = _dummy_features()
    self.embed_query(dummy)
    self.embed_documents(dummy)
    keras.layers.Layer.build(self, input_shape)  # Model.build would trace placeholders.

  def embed_query(self, features: Features, training=None) -> tf.Tensor:
    """[B, L] query features -> [B, D] query embeddings."""
    pooled = self.query_encoder(features, training=training)["pooled_output"]
    return self.query_projection(pooled)

  def embed_documents(self, features: Features, training=None) -> tf.Tensor:
    """[N, L] block features -> [N, D] document embeddings."""
    pooled = self.doc_encoder(features, training=training)["pooled_output"]
    return self.doc_projection(pooled)

  def embed_candidates(self, features: Features, training=None) -> tf.Tensor:
    """[B, K, L] candidate block features -> [B, K, D] document embeddings."""
    flat, batch, num_candidates = _flatten_candidates(features)
    embeddings = self.embed_documents(flat, training=training)
    return tf.reshape(embeddings, [batch, num_candidates, self.projection_size])

  @staticmethod
  def score(query_embeddings: tf.Tensor, candidate_embeddings: tf.Tensor) -> tf.Tensor:
    """Relevance f(x, z) = <q, z>: [B, D] x [B, K, D] -> [B, K]."""
    return tf.einsum("bd,bkd->bk", query_embeddings, candidate_embeddings)

  def call(self, inputs, training=None):
    """Relevance scores of candidates for each query.

    Args:
      inputs: {"query": [B, Lq] features, "candidates": [B, K, Lz] features}.

    Returns:
      [B, K] float32 relevance logits f(x, z).
    """
    query = self.embed_query(inputs["query"], training=training)
    candidates = self.embed_candidates(inputs["candidates"], training=training)
    return self.score(query, candidates)

  def get_config(self):
    return dict(
        name=self.name,
        query_encoder=keras.layers.serialize(self.query_encoder),
        doc_encoder=(None if self.share_towers else keras.layers.serialize(self.doc_encoder)),
        projection_size=self.projection_size,
        layer_norm_epsilon=self.layer_norm_epsilon)

  @classmethod
  def from_config(cls, config, custom_objects=None):
    config = dict(config)
    config["query_encoder"] = keras.layers.deserialize(config["query_encoder"], custom_objects)
    if config.get("doc_encoder") is not None:
      config["doc_encoder"] = keras.layers.deserialize(config["doc_encoder"], custom_objects)
    return cls(**config)
