"""The classification step: the marginal likelihood of a prepared batch
(`classification.retrieval`), and the replicated update of the query tower, the reader's BERT
and the classification head.

B texts, K blocks read, C labels, D dim, Lr reader length. The query tower re-embeds the texts
(f(x, z) = <q(x), d(z)> over the doc tower's block embeddings [B, K, D]: the retriever's
gradient), the reader reads the B*K `[CLS] x [SEP] z_body [SEP]` inputs and the head turns
each [CLS] vector into C label logits; `losses.classification_loss` marginalises over z. The
doc tower stays frozen, as in REALM's and ORQA's fine-tuning (its index does not move).
"""
from typing import Callable, Dict, List

import tensorflow as tf

from realm_tf.layers.classification_head import ClassificationHead
from realm_tf.losses.classification_loss import classification_log_probs
from realm_tf.losses.classification_loss import classification_loss
from realm_tf.qa.open_qa_step import query_tower_variables
from realm_tf.tokenization.featurizers import FEATURES
from realm_tf.training.optimizer import apply_gradients


def classification_outputs(retriever, reader, head: ClassificationHead,
                           inputs: Dict[str, tf.Tensor], training: bool) -> Dict[str, tf.Tensor]:
  """`classification_loss` of prepared inputs ("query_*" [B, Lq], "block_embeddings"
  [B, K, D], "block_mask" [B, K], "reader_*" [B, K, Lr], "labels" [B]): "loss" [B], "log_p_z"
  [B, K], "log_p_y_given_z" [B, K, C], "log_p_y" [B, C]; without "labels" the three
  distributions alone (`classification_log_probs`)."""
  query = {n: inputs[f"query_{n}"] for n in FEATURES}
  query_emb = tf.cast(retriever.embed_query(query, training=training), tf.float32)
  blocks = tf.cast(inputs["block_embeddings"], tf.float32)
  retriever_logits = tf.einsum("bd,bkd->bk", query_emb, blocks)
  ids = inputs["reader_input_word_ids"]
  batch, k = tf.shape(ids)[0], tf.shape(ids)[1]
  flat = {n: tf.reshape(inputs[f"reader_{n}"], [batch * k, -1]) for n in FEATURES}
  label_logits = head(reader.sequence_output(flat, training=training), training=training)
  label_logits = tf.reshape(label_logits, [batch, k, head.num_labels])
  if "labels" not in inputs:
    return classification_log_probs(retriever_logits, label_logits, inputs["block_mask"])
  return classification_loss(retriever_logits, label_logits, inputs["block_mask"],
                             inputs["labels"])


def trained_variables(retriever, reader, head: ClassificationHead) -> List[List[tf.Variable]]:
  """[query tower, reader BERT + head]: the two groups of trained variables."""
  return [query_tower_variables(retriever),
          reader.encoder.trainable_variables + head.trainable_variables]


def make_replica_step(retriever, reader, head: ClassificationHead, optimizer,
                      retriever_optimizer, global_batch_size: int
                      ) -> Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]]:
  """The replicated training step: the loss, its gradients and AdamW updates (the query
  tower's by `retriever_optimizer`, the reader's and head's by `optimizer`). The returned
  function takes one replica's inputs and returns sums over its texts ("loss", "correct":
  texts whose most probable label is the gold one)."""
  groups = trained_variables(retriever, reader, head)

  def replica_step(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    with tf.GradientTape() as tape:
      outputs = classification_outputs(retriever, reader, head, inputs, training=True)
      loss = tf.reduce_sum(outputs["loss"]) / float(global_batch_size)
    gradients = tape.gradient(loss, groups)
    for opt, grads, variables in zip((retriever_optimizer, optimizer), gradients, groups):
      apply_gradients(opt, [(g, v) for g, v in zip(grads, variables) if g is not None])
    predicted = tf.argmax(outputs["log_p_y"], axis=-1, output_type=tf.int32)
    correct = tf.cast(predicted == tf.cast(inputs["labels"], tf.int32), tf.float32)
    return {"loss": tf.reduce_sum(outputs["loss"]), "correct": tf.reduce_sum(correct)}

  return replica_step
