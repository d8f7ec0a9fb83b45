"""The query-embedder export: Embed_input(x) as a TF Hub SavedModel.

Legend: B questions, Lq query length, D embedding dim.

Signatures (load with `hub.load(path)` after `import tensorflow_text`, which registers the
tokenizer's ops; no realm_tf import needed):
  "serving_default": questions string [B] -> {"embeddings": float32 [B, D]}
  "embed_ids":       input_word_ids, input_mask, input_type_ids int32 [B, L]
                     (`[CLS] x [SEP]`, L <= 512) -> {"embeddings": float32 [B, D]}
  "tokenize":        questions string [B] -> {"input_word_ids", "input_mask",
                     "input_type_ids": int32 [B, Lq]} (questions truncated to Lq)
`__call__` (what `hub.KerasLayer(path)` calls): string [B] or the three id tensors as a dict
-> float32 [B, D].
Attributes: `vocab_file` (asset), `do_lower_case`, `query_length` (Lq), `embedding_dim` (D),
`score_scale` (the factor queries are scaled by; 1 for REALM's head).
"""
import tempfile

import tensorflow as tf

from realm_tf.export.doc_embedder import Untracked
from realm_tf.export.doc_embedder import vocab_asset
from realm_tf.models.retriever import Retriever
from realm_tf.models.retriever import tower_embedding
from realm_tf.tokenization.featurizers import QueryFeaturizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

ID_SPECS = {n: tf.TensorSpec([None, None], tf.int32, name=n)
            for n in ("input_word_ids", "input_mask", "input_type_ids")}
QUESTIONS_SPEC = tf.TensorSpec([None], tf.string, name="questions")


class _QueryEmbedderModule(tf.Module):

  def __init__(self, retriever: Retriever, tokenizer: WordpieceTokenizer, query_length: int,
               staging_dir: str):
    super().__init__(name="query_embedder")
    self._layers = Untracked(encoder=retriever.query_encoder,
                             projection=retriever.query_projection, pooling=retriever.pooling,
                             featurizer=QueryFeaturizer(tokenizer, seq_length=query_length))
    self.tower_variables = list(retriever.query_encoder.variables +
                                retriever.query_projection.variables)
    self.vocab_file = vocab_asset(tokenizer, staging_dir)
    self.do_lower_case = tf.Variable(tokenizer.lower_case, trainable=False)
    self.query_length = tf.Variable(query_length, dtype=tf.int64, trainable=False)
    self.embedding_dim = tf.Variable(retriever.projection_size, dtype=tf.int64,
                                     trainable=False)
    self.score_scale = tf.Variable(retriever.score_scale, dtype=tf.float32, trainable=False)

  def _embed(self, features):
    features = {n: tf.cast(features[n], tf.int32) for n in ID_SPECS}
    embeddings = tower_embedding(self._layers.encoder, self._layers.projection, features,
                                 self._layers.pooling, training=False)
    return embeddings * self.score_scale  # = Retriever.embed_query

  @tf.function(input_signature=[QUESTIONS_SPEC])
  def tokenize(self, questions):
    return self._layers.featurizer(questions)

  @tf.function(input_signature=[QUESTIONS_SPEC])
  def embed_questions(self, questions):
    return self.embed_ids(**self.tokenize(questions))

  @tf.function(input_signature=list(ID_SPECS.values()))
  def embed_ids(self, input_word_ids, input_mask, input_type_ids):
    return {"embeddings": self._embed(dict(input_word_ids=input_word_ids,
                                           input_mask=input_mask,
                                           input_type_ids=input_type_ids))}

  @tf.function
  def __call__(self, inputs):
    if isinstance(inputs, dict):
      return self.embed_ids(**{n: inputs[n] for n in ID_SPECS})["embeddings"]
    return self.embed_questions(inputs)["embeddings"]


def export_query_embedder(retriever: Retriever, tokenizer: WordpieceTokenizer, path: str,
                          query_length: int = 64) -> str:
  """Writes the query tower of `retriever` as a SavedModel at `path`; returns `path`."""
  with tempfile.TemporaryDirectory() as staging_dir:
    module = _QueryEmbedderModule(retriever, tokenizer, query_length, staging_dir)
    module.__call__.get_concrete_function(QUESTIONS_SPEC)
    module.__call__.get_concrete_function(dict(ID_SPECS))
    tf.saved_model.save(module, path, signatures={
        "serving_default": module.embed_questions, "embed_ids": module.embed_ids,
        "tokenize": module.tokenize})
  return path
