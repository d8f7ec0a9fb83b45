"""The document-embedder export: what the index builder runs over every block.

A plain TF SavedModel (no realm_tf import needed to use it) with
  signature "serving_default": input_word_ids, input_mask, input_type_ids int32 [N, L]
                               -> {"embeddings": float32 [N, D]}
  signature "embed_blocks":    title_ids, body_ids int64 ragged as (values, row_lengths)
                               -> {"embeddings": float32 [N, D]}; packs
                               `[CLS] title [SEP] body [SEP]` to <= block_length itself.
and the scalar attributes `embedding_dim`, `block_length`, `cls_id`, `sep_id`, `pad_id`,
`snapshot_step` (the trainer step the weights come from, -1 if none).
"""
import tensorflow as tf

from realm_tf.models.retriever import Retriever
from realm_tf.tokenization.bert_packer import BertPacker


class _DocEmbedderModule(tf.Module):

  def __init__(self, retriever: Retriever, cls_id: int, sep_id: int, pad_id: int,
               block_length: int, snapshot_step: int):
    super().__init__(name="doc_embedder")
    self.encoder = retriever.doc_encoder
    self.projection = retriever.doc_projection
    scalar = lambda value: tf.Variable(value, trainable=False, dtype=tf.int64)
    self.embedding_dim = scalar(retriever.projection_size)
    self.block_length = scalar(block_length)
    self.cls_id, self.sep_id, self.pad_id = scalar(cls_id), scalar(sep_id), scalar(pad_id)
    self.snapshot_step = scalar(snapshot_step)
    self._packer = BertPacker(seq_length=block_length, cls_id=cls_id, sep_id=sep_id,
                              pad_id=pad_id, truncation="waterfall")

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name=n)
                                for n in ("input_word_ids", "input_mask", "input_type_ids")])
  def serve(self, input_word_ids, input_mask, input_type_ids):
    features = dict(input_word_ids=input_word_ids, input_mask=input_mask,
                    input_type_ids=input_type_ids)
    pooled = self.encoder(features, training=False)["pooled_output"]
    return {"embeddings": tf.cast(self.projection(pooled), tf.float32)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name=n)
                                for n in ("title_values", "title_row_lengths",
                                          "body_values", "body_row_lengths")])
  def embed_blocks(self, title_values, title_row_lengths, body_values, body_row_lengths):
    titles = tf.RaggedTensor.from_row_lengths(title_values, title_row_lengths)
    bodies = tf.RaggedTensor.from_row_lengths(body_values, body_row_lengths)
    features = self._packer((tf.cast(titles, tf.int32), tf.cast(bodies, tf.int32)))
    longest = tf.reduce_max(tf.reduce_sum(features["input_mask"], axis=1))
    features = {name: t[:, :longest] for name, t in features.items()}
    return self.serve(**features)


def export_doc_embedder(retriever: Retriever, path: str, cls_id: int, sep_id: int, pad_id: int,
                        block_length: int = 288, snapshot_step: int = -1) -> str:
  """Writes the doc tower of `retriever` as a SavedModel at `path`; returns `path`."""
  module = _DocEmbedderModule(retriever, cls_id, sep_id, pad_id, block_length, snapshot_step)
  tf.saved_model.save(module, path, signatures={"serving_default": module.serve,
                                                "embed_blocks": module.embed_blocks})
  return path


class DocEmbedder:
  """A loaded doc-embedder export: `embed_blocks(title_ids, body_ids)` -> [N, D] numpy."""

  def __init__(self, path: str):
    self.path = path
    self._module = tf.saved_model.load(path)
    self.embedding_dim = int(self._module.embedding_dim.numpy())
    self.block_length = int(self._module.block_length.numpy())
    self.snapshot_step = int(self._module.snapshot_step.numpy())

  def embed_blocks(self, title_ids: tf.RaggedTensor, body_ids: tf.RaggedTensor):
    """[N, (T)] title and body wordpieces (no specials) -> float32 [N, D] numpy."""
    out = self._module.embed_blocks(
        tf.cast(title_ids.values, tf.int64), tf.cast(title_ids.row_lengths(), tf.int64),
        tf.cast(body_ids.values, tf.int64), tf.cast(body_ids.row_lengths(), tf.int64))
    return out["embeddings"].numpy()

  def embed_features(self, features):
    """[N, L] packed features -> float32 [N, D] numpy."""
    return self._module.serve(**{n: tf.cast(features[n], tf.int32) for n in
                                 ("input_word_ids", "input_mask", "input_type_ids")}
                              )["embeddings"].numpy()
