"""Open-QA fine-tuning loss (REALM §3.2 span reader, §3.3 fine-tuning; ORQA).

B questions, R blocks scored by the retriever loss (reference: 5000), k blocks read (5), S
spans per block, A gold answer spans.

loss = −log Σ_{z ∈ top-R, z has answer} p(z | x)                       (retriever)
     + the reader term, in one of two forms (`SPAN_NORMALIZATIONS`):
  "joint" (ORQA, the released code): −log Σ_{(z, s) correct} of one softmax of
    f(x, z) + g(s | z, x) over every (block, span) pair read;
  "per_document" (the patent's eq. 9): −log Σ_z p(z | x) Σ_{s correct in z} softmax_{z's
    spans} g, p(z | x) over the k read: a block's span scores may shift freely.
Each term is zeroed without a correct candidate. The blocks read are the top k unless
`read_positions` names others among the R (an answer-bearing block swapped in for training,
as DPR trains its reader).
"""
from typing import Dict, Tuple

import tensorflow as tf

from realm_tf.layers.span_scorer import masked_logit_value

SPAN_NORMALIZATIONS = ("joint", "per_document")


def marginal_log_loss(logits: tf.Tensor, is_correct: tf.Tensor) -> tf.Tensor:
  """−log Σ_correct softmax(logits), 0 where no candidate is correct.

  Args:
    logits: [..., C] scores.
    is_correct: [..., C] bool.

  Returns:
    [...] float32 loss.
  """
  logits = tf.cast(logits, tf.float32)
  is_correct = tf.cast(is_correct, tf.bool)
  any_correct = tf.reduce_any(is_correct, axis=-1)
  log_denominator = tf.reduce_logsumexp(logits, axis=-1)
  # Fill incorrect entries with the row minimum − 1e4 (finite) so rows without any correct
  # candidate stay finite; those rows are zeroed below.
  floor = tf.stop_gradient(tf.reduce_min(logits, axis=-1, keepdims=True)) - 1e4
  log_numerator = tf.reduce_logsumexp(tf.where(is_correct, logits, floor), axis=-1)
  return tf.where(any_correct, log_denominator - log_numerator, tf.zeros_like(log_denominator))


def correct_spans(span_starts: tf.Tensor, span_ends: tf.Tensor, gold_starts: tf.Tensor,
                  gold_ends: tf.Tensor) -> tf.Tensor:
  """Which candidate spans equal a gold span.

  Args:
    span_starts, span_ends: [S] candidate spans (inclusive ends).
    gold_starts, gold_ends: [B, k, A] gold spans in each block's reader input, padded with -1.

  Returns:
    [B, k, S] bool.
  """
  start_match = tf.equal(gold_starts[..., None], span_starts)  # [B, k, A, S]
  end_match = tf.equal(gold_ends[..., None], span_ends)
  return tf.reduce_any(tf.logical_and(start_match, end_match), axis=-2)


def per_document_log_probs(span_logits: tf.Tensor, span_mask: tf.Tensor) -> tf.Tensor:
  """log softmax of each block's span logits over its valid spans (eq. 9's denominator).

  Args:
    span_logits: [..., S] span scores g(s | z, x).
    span_mask: [..., S] bool, the valid spans.

  Returns:
    [..., S] float32: log p(s | z, x) on valid spans; a block without one gets the row's
    finite floor everywhere (it can hold no answer).
  """
  span_logits = tf.cast(span_logits, tf.float32)
  floor = tf.stop_gradient(tf.reduce_min(span_logits, axis=-1, keepdims=True)) - 1e4
  masked = tf.where(span_mask, span_logits, floor)
  return masked - tf.reduce_logsumexp(masked, axis=-1, keepdims=True)


def per_document_reader_loss(read_logits: tf.Tensor, span_logits: tf.Tensor,
                             span_is_correct: tf.Tensor, span_mask: tf.Tensor) -> tf.Tensor:
  """−log Σ_z p(z | x) Σ_{s correct in z} p(s | z, x), 0 without a correct span.

  Args:
    read_logits: [B, k] f(x, z) of the blocks read.
    span_logits, span_is_correct, span_mask: [B, k, S].

  Returns:
    [B] float32.
  """
  log_blocks = tf.nn.log_softmax(tf.cast(read_logits, tf.float32), axis=-1)  # [B, k]
  joint = log_blocks[:, :, None] + per_document_log_probs(span_logits, span_mask)  # [B, k, S]
  correct = tf.logical_and(span_is_correct, span_mask)
  batch = tf.shape(joint)[0]
  floor = tf.stop_gradient(tf.reduce_min(joint)) - 1e4
  # No renormalisation over the pairs: a block read without spans (the null document) keeps
  # its share p(z | x), which no answer can come from.
  log_likelihood = tf.reduce_logsumexp(tf.reshape(tf.where(correct, joint, floor), [batch, -1]),
                                       axis=-1)
  any_correct = tf.reduce_any(tf.reshape(correct, [batch, -1]), axis=-1)
  return tf.where(any_correct, -log_likelihood, tf.zeros_like(log_likelihood))


def open_qa_loss(retriever_logits: tf.Tensor, has_answer: tf.Tensor, span_logits: tf.Tensor,
                 span_is_correct: tf.Tensor,
                 span_mask: tf.Tensor = None, read_positions: tf.Tensor = None,
                 span_normalization: str = "joint"
                 ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
  """The ORQA/REALM fine-tuning loss, averaged over questions.

  Args:
    retriever_logits: [B, R] retrieval scores of the top-R blocks, best first.
    has_answer: [B, R] bool, the block's text contains an answer.
    span_logits: [B, k, S] span scores of the top-k blocks (k ≤ R), invalid spans masked.
    span_is_correct: [B, k, S] bool from `correct_spans`.
    span_mask: optional [B, k, S] bool of valid spans (default: spans scored above
      `masked_logit_value` / 2); a "correct" span outside it is ignored.
    read_positions: optional int [B, k], the position in the R blocks of each block read
      (default: 0..k-1, the top k).
    span_normalization: the reader term's form (module docstring).

  Returns:
    (loss [] float32, {"retriever_loss": [B], "reader_loss": [B], "reader_logits": [B, k*S]}).
  """
  retriever_loss = marginal_log_loss(retriever_logits, has_answer)
  if read_positions is None:
    read_logits = retriever_logits[:, :tf.shape(span_logits)[1]]
  else:
    read_logits = tf.gather(retriever_logits, read_positions, batch_dims=1)  # [B, k]
  reader_logits = (tf.cast(span_logits, tf.float32) +
                   tf.cast(read_logits[..., None], tf.float32))  # [B, k, S]
  if span_mask is None:
    span_mask = tf.cast(span_logits, tf.float32) > masked_logit_value(tf.float32) / 2
  span_mask = tf.cast(span_mask, tf.bool)
  span_is_correct = tf.logical_and(span_is_correct, span_mask)
  batch = tf.shape(reader_logits)[0]
  reader_logits = tf.reshape(reader_logits, [batch, -1])
  if span_normalization == "per_document":
    reader_loss = per_document_reader_loss(read_logits, span_logits, span_is_correct, span_mask)
  elif span_normalization == "joint":
    reader_loss = marginal_log_loss(reader_logits, tf.reshape(span_is_correct, [batch, -1]))
  else:
    raise ValueError(f"span_normalization must be one of {SPAN_NORMALIZATIONS}, got "
                     f"{span_normalization!r}")
  loss = tf.reduce_mean(retriever_loss + reader_loss)
  return loss, dict(retriever_loss=retriever_loss, reader_loss=reader_loss,
                    reader_logits=reader_logits)
