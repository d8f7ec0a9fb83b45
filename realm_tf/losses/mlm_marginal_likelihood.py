"""REALM pre-training loss: marginal likelihood of masked tokens over retrieved documents.

Legend: B batch, K candidates (null document included), M masked positions, V vocabulary.
Two forms (`MLM_LOSS_FORMS`):
  "token" (the released REALM code): every masked token j is marginalised on its own,
    log p(y_j | x) = logsumexp_z( log_softmax_z f(x, z) + log p(y_j | z, x) );
  "sequence" (the paper's §3.2): one document explains all the masks of x,
    log p(y | x) = logsumexp_z( log_softmax_z f(x, z) + Σ_j log p(y_j | z, x) ).
They agree when x has one mask. All arithmetic is float32, whatever the model's compute dtype.
"""
from typing import Tuple

import tensorflow as tf

MLM_LOSS_FORMS = ("token", "sequence")


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


def sequence_marginal_log_probs(candidate_logits: tf.Tensor, token_log_probs: tf.Tensor,
                                masked_lm_weights: tf.Tensor) -> tf.Tensor:
  """log p(y | x) = logsumexp_z(log p(z | x) + Σ_j w_j log p(y_j | z, x)).

  Args:
    candidate_logits: [B, K] relevance scores f(x, z).
    token_log_probs: [B, K, M] from `masked_token_log_probs`.
    masked_lm_weights: [B, M] 1.0 on real masked tokens.

  Returns:
    [B] float32; 0 for an example without masked tokens.
  """
  candidate_log_probs = tf.nn.log_softmax(tf.cast(candidate_logits, tf.float32), axis=-1)
  weights = tf.cast(masked_lm_weights, tf.float32)[:, None, :]
  return tf.reduce_logsumexp(
      candidate_log_probs + tf.reduce_sum(token_log_probs * weights, axis=-1), axis=1)


def marginal_mlm_loss(candidate_logits: tf.Tensor, mlm_logits: tf.Tensor,
                      masked_lm_ids: tf.Tensor,
                      masked_lm_weights: tf.Tensor,
                      normalizer: tf.Tensor = None,
                      form: str = "token") -> Tuple[tf.Tensor, tf.Tensor]:
  """Negative marginal log-likelihood of the masked tokens, in `form` (module docstring),
  divided by the (weighted) masked-token count in both forms.

  Args:
    candidate_logits: [B, K] relevance scores.
    mlm_logits: [B, K, M, V] reader MLM logits.
    masked_lm_ids: [B, M] gold ids.
    masked_lm_weights: [B, M] 1.0 on real masked tokens, 0.0 on padding.
    normalizer: the token count to divide by; default Σ masked_lm_weights. Under
      tf.distribute pass the global batch's count so replica losses sum to the global mean.
    form: "token" or "sequence".

  Returns:
    (loss [] float32, token_log_probs [B, K, M]). A batch with no masked token has loss 0.
  """
  token_log_probs = masked_token_log_probs(mlm_logits, masked_lm_ids)
  weights = tf.cast(masked_lm_weights, tf.float32)
  if form == "token":
    total = tf.reduce_sum(marginal_token_log_probs(candidate_logits, token_log_probs) * weights)
  elif form == "sequence":
    total = tf.reduce_sum(sequence_marginal_log_probs(candidate_logits, token_log_probs,
                                                      weights))
  else:
    raise ValueError(f"form must be one of {MLM_LOSS_FORMS}, got {form!r}")
  if normalizer is None:
    normalizer = tf.reduce_sum(weights)
  loss = -tf.math.divide_no_nan(total, tf.cast(normalizer, tf.float32))
  return loss, token_log_probs
