"""The REALM neural knowledge retriever p(z|x) ∝ exp(Embed_input(x) · Embed_doc(z)).

Each tower is BERT -> pooling -> head:
* REALM's (the default, for BERT/REALM checkpoints): the [CLS] pooler output
  (`pooling="cls_pooled"`) -> Dense(D) -> LayerNorm (`projection="dense_layernorm"`).
* a sentence-embedding checkpoint's own (all-MiniLM-L6-v2): the mean of the token vectors
  under the input mask (`pooling="mean"`) -> unit length (`projection="l2_normalize"`, D = the
  hidden size, no weights). The checkpoint's cosine geometry is kept exactly, so the retriever
  starts where the checkpoint is. Cosines lie in [-1, 1], too flat for a softmax over
  candidates, so query embeddings are multiplied by `score_scale` (the temperature
  sentence-transformers trains such models with is 1/20); the index holds unit doc vectors.
"""
from typing import Dict, Optional

import tensorflow as tf

from realm_tf.keras import keras
from realm_tf.layers.embedding_projection import EmbeddingProjection
from realm_tf.layers.l2_normalization import L2Normalization
from realm_tf.tokenization import doc_input as doc_inputs

Features = Dict[str, tf.Tensor]  # input_word_ids, input_mask, input_type_ids


def _flatten_candidates(features: Features):
  """[B, K, L] features -> ([B*K, L] features, B, K)."""
  ids = features["input_word_ids"]
  batch, num_candidates = tf.shape(ids)[0], tf.shape(ids)[1]
  flat = {name: tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
          for name, t in features.items()}
  return flat, batch, num_candidates


POOLINGS = ("cls_pooled", "mean")
PROJECTIONS = ("dense_layernorm", "l2_normalize")


def pool(encoder_outputs: Dict[str, tf.Tensor], input_mask: tf.Tensor,
         pooling: str) -> tf.Tensor:
  """A BERT encoder's outputs -> [N, H] vectors.

  Args:
    encoder_outputs: Model Garden encoder outputs ("pooled_output" [N, H], "sequence_output"
      [N, L, H]).
    input_mask: [N, L] 1 for real tokens.
    pooling: "cls_pooled" (the pooler's tanh(W h_[CLS])) or "mean" (mean of the real tokens'
      vectors, in float32).
  """
  if pooling == "cls_pooled":
    return encoder_outputs["pooled_output"]
  if pooling == "mean":
    mask = tf.cast(input_mask, tf.float32)[:, :, tf.newaxis]  # [N, L, 1]
    total = tf.reduce_sum(tf.cast(encoder_outputs["sequence_output"], tf.float32) * mask, 1)
    return total / tf.maximum(tf.reduce_sum(mask, 1), 1e-9)
  raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")


def tower_embedding(encoder: keras.layers.Layer, head: keras.layers.Layer, features: Features,
                    pooling: str, training=None) -> tf.Tensor:
  """[N, L] features -> [N, D] float32 embeddings of one tower (BERT -> pool -> head)."""
  outputs = encoder(features, training=training)
  return tf.cast(head(pool(outputs, features["input_mask"], pooling)), tf.float32)


def _head(projection: str, projection_size: int, layer_norm_epsilon: float, name: str):
  if projection == "dense_layernorm":
    return EmbeddingProjection(projection_size, layer_norm_epsilon, name=name)
  if projection == "l2_normalize":
    return L2Normalization(name=name)
  raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")


def _dummy_features(length: int = 2) -> Features:
  ones = tf.ones([1, length], tf.int32)
  return dict(input_word_ids=ones, input_mask=ones, input_type_ids=0 * ones)


@keras.utils.register_keras_serializable(package="realm_tf")
class Retriever(keras.Model):
  """Query and document towers: BERT -> pooling -> head (see the module docstring).

  With `doc_encoder=None` the towers share every weight (BERT and projection), as the released
  REALM embedder does; otherwise each tower has its own BERT and projection.

  Args:
    query_encoder: a Model Garden BERT encoder (dict in -> dict with "pooled_output" and
      "sequence_output").
    doc_encoder: the document tower's encoder, or None to share the query tower.
    projection_size: D (REALM: 128; with "l2_normalize", the encoder's hidden size).
    layer_norm_epsilon: epsilon of the projection LayerNorm.
    pooling: "cls_pooled" or "mean".
    projection: "dense_layernorm" or "l2_normalize".
    score_scale: query embeddings are multiplied by it (1 for REALM's head).
    doc_input: the form of the blocks the doc tower reads, "title_body" or "body"
      (`tokenization.doc_input`); it travels with the retriever (its config, its exports)
      so that every index of its embeddings is built in the form it was trained on.
  """

  def __init__(self, query_encoder: keras.layers.Layer,
               doc_encoder: Optional[keras.layers.Layer] = None, projection_size: int = 128,
               layer_norm_epsilon: float = 1e-12, pooling: str = "cls_pooled",
               projection: str = "dense_layernorm", score_scale: float = 1.0,
               doc_input: str = doc_inputs.DEFAULT_DOC_INPUT, **kwargs):
    super().__init__(**kwargs)
    if pooling not in POOLINGS:
      raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    if score_scale <= 0:
      raise ValueError(f"score_scale must be > 0, got {score_scale}")
    self.pooling, self.projection, self.score_scale = pooling, projection, float(score_scale)
    self.doc_input = doc_inputs.check(doc_input)
    self.query_encoder = query_encoder
    self._separate_doc_encoder = doc_encoder
    self.doc_encoder = doc_encoder if doc_encoder is not None else query_encoder
    self.projection_size = projection_size
    self.layer_norm_epsilon = layer_norm_epsilon
    self.query_projection = _head(projection, projection_size, layer_norm_epsilon,
                                  "query_projection")
    self.doc_projection = (
        self.query_projection if doc_encoder is None else
        _head(projection, projection_size, layer_norm_epsilon, "doc_projection"))

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
    """[B, L] query features -> [B, D] query embeddings (scaled by `score_scale`)."""
    embeddings = tower_embedding(self.query_encoder, self.query_projection, features,
                                 self.pooling, training)
    return embeddings * self.score_scale if self.score_scale != 1.0 else embeddings

  def embed_documents(self, features: Features, training=None) -> tf.Tensor:
    """[N, L] block features -> [N, D] document embeddings."""
    return tower_embedding(self.doc_encoder, self.doc_projection, features, self.pooling,
                           training)

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
        layer_norm_epsilon=self.layer_norm_epsilon,
        pooling=self.pooling,
        projection=self.projection,
        score_scale=self.score_scale,
        doc_input=self.doc_input)

  @classmethod
  def from_config(cls, config, custom_objects=None):
    config = dict(config)
    config["query_encoder"] = keras.layers.deserialize(config["query_encoder"], custom_objects)
    if config.get("doc_encoder") is not None:
      config["doc_encoder"] = keras.layers.deserialize(config["doc_encoder"], custom_objects)
    return cls(**config)
