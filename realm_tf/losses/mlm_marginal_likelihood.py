"""REALM pre-training loss: marginal likelihood of masked tokens over retrieved documents.

Legend: B batch, K candidates (null document included), M masked positions, V vocabulary.
For every masked token j (REALM reference code marginalises per token):
  log p(y_j | x) = logsumexp_z( log_softmax_z f(x, z) + log p(y_j | z, x) ).
All arithmetic is float32, whatever the model's compute dtype.
"""
from typing import Tuple

import tensorflow as tf


def masked_token_log_probs(mlm_logits: tf.Tensor, masked_lm_ids: tf.Tensor) -> tf.Tensor:
  """log p(y_j | z, x) of the gold tokens.

  Args:
    mlm_logits: [B, K, M, V] reader MLM logits at the masked positions.
    masked_lm_ids: [B, M] gold token ids (any valid id on padded positions).

  Returns:
    [B, K, M] float32 log-probabilities.
  """
  log_probs = tf.nn.log_softmax(tf.cast(mlm_logits, tf.float32), axis=-1)
  num_candidates = tf.shape(log_probs)[1]
  targets = tf.tile(masked_lm_ids[:, None, :], [1, num_candidates, 1])  # [B, K, M]
  return tf.gather(log_probs, targets, axis=-1, batch_dims=3)


def marginal_token_log_probs(candidate_logits: tf.Tensor,
                             token_log_probs: tf.Tensor) -> tf.Tensor:
  """log p(y_j | x) = logsumexp_z(log p(z | x) + log p(y_j | z, x)).

  Args:
    candidate_logits: [B, K] relevance scores f(x, z).
    token_log_probs: [B, K, M] from `masked_token_log_probs`.

  Returns:
    [B, M] float32 marginal log-likelihood of each masked token.
  """
  candidate_log_probs = tf.nn.log_softmax(tf.cast(candidate_logits, tf.float32), axis=-1)
  return tf.reduce_logsumexp(candidate_log_probs[:, :, None] + token_log_probs, axis=1)


def marginal_mlm_loss(candidate_logits: tf.Tensor, mlm_logits: tf.Tensor,
                      masked_lm_ids: tf.Tensor,
                      masked_lm_weights: tf.Tensor,
                      normalizer: tf.Tensor = None) -> Tuple[tf.Tensor, tf.Tensor]:
  """Negative marginal log-likelihood averaged over the (weighted) masked tokens.

  Args:
    candidate_logits: [B, K] relevance scores.
    mlm_logits: [B, K, M, V] reader MLM logits.
    masked_lm_ids: [B, M] gold ids.
    masked_lm_weights: [B, M] 1.0 on real masked tokens, 0.0 on padding.
    normalizer: the token count to divide by; default Σ masked_lm_weights. Under
      tf.distribute pass the global batch's count so replica losses sum to the global mean.

  Returns:
    (loss [] float32, token_log_probs [B, K, M]). A batch with no masked token has loss 0.
  """
  token_log_probs = masked_token_log_probs(mlm_logits, masked_lm_ids)
  marginal = marginal_token_log_probs(candidate_logits, token_log_probs)
  weights = tf.cast(masked_lm_weights, tf.float32)
  if normalizer is None:
    normalizer = tf.reduce_sum(weights)
  loss = -tf.math.divide_no_nan(tf.reduce_sum(marginal * weights),
                                tf.cast(normalizer, tf.float32))
  return loss, token_log_probs
