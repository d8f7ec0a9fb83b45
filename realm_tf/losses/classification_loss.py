"""Retrieval-augmented classification's marginal likelihood (REALM's p(y|x) with a label y).

B texts, K blocks read (the null document among them), C labels.

log p(y | x) = log Σ_z p(z | x) p(y | z, x),  p(z | x) = softmax_z f(x, z) over the K,
p(y | z, x) = softmax_y of the reader's label logits for block z;  loss = −log p(y* | x).

Computed in log space (logsumexp over z), so a block with p(z | x) ≈ 0 costs nothing and the
gradient reaches f(x, z) (the query tower) through p(z | x) as well as the reader.
"""
from typing import Dict

import tensorflow as tf

# The log-probability of a block that is not read (a missing search result): finite, so that
# its terms vanish in the logsumexp without a NaN in the gradient.
_MASKED_LOG_PROB = -1e9


def classification_log_probs(retriever_logits: tf.Tensor, label_logits: tf.Tensor,
                             block_mask: tf.Tensor) -> Dict[str, tf.Tensor]:
  """The distributions of the module docstring.

  Args:
    retriever_logits: [B, K] f(x, z).
    label_logits: [B, K, C] the reader's logits for each block read.
    block_mask: [B, K] bool, False where no block was retrieved (at least one True a row).

  Returns:
    float32 "log_p_z" [B, K] log p(z | x), "log_p_y_given_z" [B, K, C] log p(y | z, x) and
    "log_p_y" [B, C] log p(y | x).
  """
  block_mask = tf.cast(block_mask, tf.bool)
  logits = tf.where(block_mask, tf.cast(retriever_logits, tf.float32), _MASKED_LOG_PROB)
  log_p_z = tf.where(block_mask, tf.nn.log_softmax(logits, axis=-1), _MASKED_LOG_PROB)
  log_p_y_given_z = tf.nn.log_softmax(tf.cast(label_logits, tf.float32), axis=-1)
  log_p_y = tf.reduce_logsumexp(log_p_z[:, :, tf.newaxis] + log_p_y_given_z, axis=1)
  return {"log_p_z": log_p_z, "log_p_y_given_z": log_p_y_given_z, "log_p_y": log_p_y}


def classification_loss(retriever_logits: tf.Tensor, label_logits: tf.Tensor,
                        block_mask: tf.Tensor, labels: tf.Tensor) -> Dict[str, tf.Tensor]:
  """−log p(y* | x) [B] ("loss") with the `classification_log_probs` it came from.

  Args:
    retriever_logits, label_logits, block_mask: as `classification_log_probs`.
    labels: [B] int, the gold label ids in [0, C).
  """
  probs = classification_log_probs(retriever_logits, label_logits, block_mask)
  gold = tf.gather(probs["log_p_y"], tf.cast(labels, tf.int32), axis=1, batch_dims=1)
  return dict(probs, loss=-gold)
