"""The query-embedder export: Embed_input(x) as a TF Hub SavedModel.

B questions, L length (Lq: the query length), D embedding dim, H hidden size:
  "serving_default": questions string [B] -> {"embeddings": float32 [B, D]}
  "embed_ids":       input_word_ids, input_mask, input_type_ids int32 [B, L] -> the same
  "tokenize":        questions string [B] -> the three ids, int32 [B, Lq]
  `__call__`:        string [B] -> float32 [B, D]; the id dict -> TF Hub's BERT-encoder
                     outputs [B, H] / [B, L, H] plus "embeddings" [B, D]
A Reusable SavedModel (`signatures.reusable`): `hub.KerasLayer(path, trainable=True)`
fine-tunes the tower. "embeddings" are already scaled by `score_scale` (1 for REALM's head),
so that their inner products with the doc embedder's are the model's retrieval logits.
docs/exports.md has the details.
"""
import tempfile

import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.models.retriever import Retriever
from realm_tf.signatures.doc_embedder import Untracked
from realm_tf.signatures.doc_embedder import vocab_asset
from realm_tf.signatures.reusable import ReusableModule
from realm_tf.signatures.reusable import tower_outputs
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

ID_SPECS = {n: tf.TensorSpec([None, None], tf.int32, name=n)
            for n in ("input_word_ids", "input_mask", "input_type_ids")}
QUESTIONS_SPEC = tf.TensorSpec([None], tf.string, name="questions")


class _QueryEmbedderModule(ReusableModule):

  def __init__(self, retriever: Retriever, tokenizer: WordpieceTokenizer, query_length: int,
               staging_dir: str):
    score_scale = tf.Variable(retriever.score_scale, dtype=tf.float32, trainable=False)
    super().__init__(retriever.query_encoder.variables + retriever.query_projection.variables,
                     state=[score_scale])
    self._layers = Untracked(encoder=retriever.query_encoder,
                             projection=retriever.query_projection, pooling=retriever.pooling,
                             featurizer=Featurizer(tokenizer, query_length=query_length))
    self.vocab_file = vocab_asset(tokenizer, staging_dir)
    self.do_lower_case = tf.Variable(tokenizer.lower_case, trainable=False)
    self.query_length = tf.Variable(query_length, dtype=tf.int64, trainable=False)
    self.embedding_dim = tf.Variable(retriever.projection_size, dtype=tf.int64,
                                     trainable=False)
    self.score_scale = score_scale

  def _outputs(self, features, training=False):
    outputs = tower_outputs(self._layers.encoder, self._layers.projection,
                            {n: features[n] for n in ID_SPECS}, self._layers.pooling, training)
    outputs["embeddings"] *= self.score_scale  # = Retriever.embed_query
    return outputs

  @graph_functions.function(input_signature=[QUESTIONS_SPEC])
  def tokenize(self, questions):
    return self._layers.featurizer.queries(questions)

  @graph_functions.function(input_signature=[QUESTIONS_SPEC])
  def embed_questions(self, questions):
    return self.embed_ids(**self.tokenize(questions))

  @graph_functions.function(input_signature=list(ID_SPECS.values()))
  def embed_ids(self, input_word_ids, input_mask, input_type_ids):
    features = dict(input_word_ids=input_word_ids, input_mask=input_mask,
                    input_type_ids=input_type_ids)
    return {"embeddings": self._outputs(features)["embeddings"]}

  @graph_functions.function
  def __call__(self, inputs, training=False):
    if isinstance(inputs, dict):
      return self._outputs(inputs, training)
    return self._outputs(self.tokenize(inputs), training)["embeddings"]


def export_query_embedder(retriever: Retriever, tokenizer: WordpieceTokenizer, path: str,
                          query_length: int = 64) -> str:
  """Writes the query tower of `retriever` as a SavedModel at `path`; returns `path`."""
  with tempfile.TemporaryDirectory() as staging_dir:
    module = _QueryEmbedderModule(retriever, tokenizer, query_length, staging_dir)
    module.save(path, [QUESTIONS_SPEC, dict(ID_SPECS)], {
        "serving_default": module.embed_questions.get_concrete_function,
        "embed_ids": module.embed_ids.get_concrete_function,
        "tokenize": module.tokenize.get_concrete_function})
  return path
