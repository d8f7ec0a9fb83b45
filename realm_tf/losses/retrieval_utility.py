"""Retrieval utility (REALM Appendix D, eq. 2; Figure 4): how much a retrieval helps over the
null document.

Per document, as Appendix D defines it: RU(z|x) = log p(y | z, x) − log p(y | ∅, x), with y
all masked tokens of x (`document_retrieval_utility`). Of the marginal, as pre-training logs
it: RU(x) = log p(y | x) − log p(y | ∅, x), summed over tokens (`retrieval_utility`).
Legend: B batch, K candidates, M masked positions.
"""
import tensorflow as tf

from realm_tf.losses.mlm_marginal_likelihood import marginal_token_log_probs


def retrieval_utility(candidate_logits: tf.Tensor, token_log_probs: tf.Tensor,
                      masked_lm_weights: tf.Tensor, null_index: int = 0) -> tf.Tensor:
  """Per-example retrieval utility of the marginal: log p(y | x) − log p(y | ∅, x), p(y | x)
  marginalised per token over the K candidates.

  Args:
    candidate_logits: [B, K] relevance scores.
    token_log_probs: [B, K, M] log p(y_j | z, x).
    masked_lm_weights: [B, M] 1.0 on real masked tokens.
    null_index: position of the null document among the K candidates.

  Returns:
    [B] float32; 0 for an example without masked tokens.
  """
  weights = tf.cast(masked_lm_weights, tf.float32)
  marginal = marginal_token_log_probs(candidate_logits, token_log_probs)  # [B, M]
  with_null = token_log_probs[:, null_index, :]  # [B, M]
  return tf.reduce_sum((marginal - with_null) * weights, axis=-1)


def document_retrieval_utility(token_log_probs: tf.Tensor, masked_lm_weights: tf.Tensor,
                               null_index: int = 0) -> tf.Tensor:
  """RU(z|x) = log p(y | z, x) − log p(y | ∅, x) of every candidate (Appendix D's definition,
  per document; y all masked tokens of x).

  Args:
    token_log_probs: [B, K, M] log p(y_j | z, x).
    masked_lm_weights: [B, M] 1.0 on real masked tokens.
    null_index: position of the null document among the K candidates.

  Returns:
    [B, K] float32 (0 at the null document itself).
  """
  weights = tf.cast(masked_lm_weights, tf.float32)[:, None, :]
  sequence = tf.reduce_sum(token_log_probs * weights, axis=-1)  # [B, K] log p(y | z, x)
  return sequence - sequence[:, null_index:null_index + 1]
