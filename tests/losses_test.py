"""Losses against hand computation, and their stability on degenerate inputs."""
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import log_softmax, logsumexp

from realm_tf import losses
from realm_tf.layers.span_scorer import masked_logit_value


def _finite_gradients(fn, *tensors):
  variables = [tf.Variable(t) for t in tensors]
  with tf.GradientTape() as tape:
    value = fn(*variables)
  grads = tape.gradient(value, variables)
  assert np.isfinite(value.numpy()).all(), value
  for g in grads:
    if g is not None:
      assert np.isfinite(tf.convert_to_tensor(g).numpy()).all()
  return value


def test_marginal_mlm_loss_matches_numpy():
  rng = np.random.default_rng(0)
  b, k, m, v = 2, 3, 4, 7
  relevance = rng.normal(size=(b, k)).astype(np.float32)
  logits = rng.normal(size=(b, k, m, v)).astype(np.float32)
  ids = rng.integers(0, v, (b, m)).astype(np.int32)
  weights = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], np.float32)
  token = np.take_along_axis(log_softmax(logits, -1),
                             np.broadcast_to(ids[:, None, :, None], (b, k, m, 1)), -1)[..., 0]
  marginal = logsumexp(log_softmax(relevance, -1)[:, :, None] + token, axis=1)
  expected = -(marginal * weights).sum() / weights.sum()
  loss, token_log_probs = losses.marginal_mlm_loss(relevance, logits, ids, weights)
  np.testing.assert_allclose(token_log_probs, token, atol=1e-5)
  np.testing.assert_allclose(loss, expected, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequence_marginal_mlm_loss_matches_numpy(seed):
  """The paper's form: log Σ_z p(z|x) Π_j p(y_j|z,x), one document for all the masks; it equals
  the per-token form for one mask and differs for several."""
  rng = np.random.default_rng(seed)
  b, k, m, v = 3, 4, 3, 9
  relevance = rng.normal(scale=2.0, size=(b, k)).astype(np.float32)
  logits = rng.normal(scale=2.0, size=(b, k, m, v)).astype(np.float32)
  ids = rng.integers(0, v, (b, m)).astype(np.int32)
  weights = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0]], np.float32)
  token = np.take_along_axis(log_softmax(logits, -1),
                             np.broadcast_to(ids[:, None, :, None], (b, k, m, 1)), -1)[..., 0]
  sequence = logsumexp(log_softmax(relevance, -1) + (token * weights[:, None, :]).sum(-1),
                       axis=1)  # [B]
  loss, _ = losses.marginal_mlm_loss(relevance, logits, ids, weights, form="sequence")
  np.testing.assert_allclose(loss, -sequence.sum() / weights.sum(), atol=1e-5)
  np.testing.assert_allclose(
      losses.sequence_marginal_log_probs(relevance, token, weights), sequence, atol=1e-5)
  per_token = logsumexp(log_softmax(relevance, -1)[:, :, None] + token, axis=1)  # [B, M]
  np.testing.assert_allclose(sequence[1], per_token[1, 0], atol=1e-5)  # one mask: the same
  assert abs(sequence[0] - per_token[0].sum()) > 1e-3  # several: not the same
  with pytest.raises(ValueError, match="form must be one of"):
    losses.marginal_mlm_loss(relevance, logits, ids, weights, form="other")


def test_per_document_retrieval_utility_matches_numpy():
  rng = np.random.default_rng(3)
  token = rng.normal(size=(2, 4, 3)).astype(np.float32)  # log p(y_j|z,x), null document first
  weights = np.array([[1, 1, 0], [1, 1, 1]], np.float32)
  sequence = (token * weights[:, None, :]).sum(-1)
  np.testing.assert_allclose(losses.document_retrieval_utility(token, weights),
                             sequence - sequence[:, :1], atol=1e-6)


def test_marginal_mlm_loss_is_zero_without_masks_and_stable_in_bfloat16():
  rng = np.random.default_rng(1)
  relevance = rng.normal(size=(2, 3)).astype(np.float32)
  logits = rng.normal(size=(2, 3, 4, 7)).astype(np.float32)
  ids = np.zeros((2, 4), np.int32)
  loss = _finite_gradients(
      lambda r, l: losses.marginal_mlm_loss(r, l, ids, np.zeros((2, 4), np.float32))[0],
      relevance, logits)
  assert loss.numpy() == 0.0
  bf16 = _finite_gradients(
      lambda r, l: losses.marginal_mlm_loss(r, l, ids, np.ones((2, 4), np.float32))[0],
      tf.cast(relevance * 100, tf.bfloat16), tf.cast(logits * 100, tf.bfloat16))
  assert bf16.dtype == tf.float32


def test_retrieval_utility():
  # Candidate 0 is the null document; the only real document makes the gold token certain.
  relevance = np.array([[0.0, 0.0]], np.float32)  # p(z|x) = 1/2 each
  token = np.log(np.array([[[0.25], [1.0]]], np.float32))  # [B=1, K=2, M=1]
  ru = losses.retrieval_utility(relevance, token, np.ones((1, 1), np.float32)).numpy()
  np.testing.assert_allclose(ru, [np.log(0.5 * 0.25 + 0.5 * 1.0) - np.log(0.25)], atol=1e-6)
  assert losses.retrieval_utility(relevance, token, np.zeros((1, 1), np.float32)).numpy() == 0


def test_marginal_log_loss():
  logits = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], np.float32)
  correct = np.array([[False, True, True], [False, False, False]])
  loss = losses.marginal_log_loss(logits, correct).numpy()
  np.testing.assert_allclose(loss[0], logsumexp(logits[0]) - logsumexp(logits[0, 1:]), atol=1e-6)
  assert loss[1] == 0.0


def test_open_qa_loss_without_any_answer_is_zero_with_finite_gradients():
  masked = masked_logit_value(tf.float32)
  span_logits = np.full((1, 2, 5), masked, np.float32)  # every span masked (empty blocks)
  retriever = np.array([[0.5, -0.2, 0.1]], np.float32)
  nothing = np.zeros((1, 2, 5), bool)
  loss = _finite_gradients(
      lambda r, s: losses.open_qa_loss(r, np.zeros((1, 3), bool), s, nothing)[0],
      retriever, span_logits)
  assert loss.numpy() == 0.0


def test_open_qa_loss_hand_computed_and_bfloat16():
  retriever = np.array([[2.0, 1.0, 0.0]], np.float32)
  has_answer = np.array([[False, True, True]])
  span = np.array([[[0.0, 1.0], [2.0, masked_logit_value(tf.float32)]]], np.float32)
  correct = np.array([[[False, True], [True, True]]])  # the masked "correct" span is ignored
  mask = np.array([[[True, True], [True, False]]])
  loss, parts = losses.open_qa_loss(retriever, has_answer, span, correct, span_mask=mask)
  reader = (span + retriever[:, :2, None]).reshape(-1)[:3]
  expected_reader = logsumexp(reader) - logsumexp(reader[[1, 2]])
  expected_retriever = logsumexp(retriever[0]) - logsumexp(retriever[0, 1:])
  np.testing.assert_allclose(parts["reader_loss"], [expected_reader], atol=1e-5)
  np.testing.assert_allclose(parts["retriever_loss"], [expected_retriever], atol=1e-5)
  np.testing.assert_allclose(loss, expected_reader + expected_retriever, atol=1e-5)
  bf16_span = tf.where(mask, tf.cast(span, tf.bfloat16),
                       tf.constant(masked_logit_value(tf.bfloat16), tf.bfloat16))
  bf16 = _finite_gradients(
      lambda r, s: losses.open_qa_loss(r, has_answer, s, correct, span_mask=mask)[0],
      tf.cast(retriever, tf.bfloat16), bf16_span)
  np.testing.assert_allclose(bf16, loss, rtol=3e-2)


def test_open_qa_loss_reads_the_blocks_at_read_positions():
  retriever = np.array([[2.0, 1.0, 0.5, -1.0]], np.float32)
  has_answer = np.array([[False, False, False, True]])
  span = np.array([[[0.0, 1.0], [3.0, 0.5]]], np.float32)
  correct = np.array([[[False, False], [True, False]]])  # the answer is in the 2nd block read
  _, parts = losses.open_qa_loss(retriever, has_answer, span, correct,
                                 read_positions=np.array([[0, 3]], np.int32))
  reader = (span + retriever[:, [0, 3], None]).reshape(-1)  # block 3 swapped in for block 1
  np.testing.assert_allclose(parts["reader_loss"], [logsumexp(reader) - reader[2]], atol=1e-5)
  _, top = losses.open_qa_loss(retriever, has_answer, span, correct,
                               read_positions=np.array([[0, 1]], np.int32))
  _, default = losses.open_qa_loss(retriever, has_answer, span, correct)
  np.testing.assert_allclose(top["reader_loss"], default["reader_loss"])
  assert abs(float(top["reader_loss"][0]) - float(parts["reader_loss"][0])) > 0.1


def test_per_document_span_softmax_matches_numpy():
  """The patent's eq. 9: −log Σ_z p(z|x) Σ_{s correct} softmax_{s ∈ z}(g), each block's spans
  normalised on their own; a block read without a valid span (the null document) keeps its
  share p(z|x), which no answer comes from."""
  rng = np.random.default_rng(4)
  b, k, s = 3, 4, 6
  masked = masked_logit_value(tf.float32)
  retriever = rng.normal(scale=2.0, size=(b, 5)).astype(np.float32)
  span = rng.normal(scale=3.0, size=(b, k, s)).astype(np.float32)
  mask = rng.random((b, k, s)) < 0.8
  mask[:, 0] = False  # the null document: no span
  span = np.where(mask, span, masked).astype(np.float32)
  correct = (rng.random((b, k, s)) < 0.2) & mask
  correct[2] = False  # no answer read: zero
  _, parts = losses.open_qa_loss(retriever, np.zeros((b, 5), bool), span, correct,
                                 span_normalization="per_document")
  log_blocks = log_softmax(retriever[:, :k], -1)
  expected = []
  for i in range(b):
    total = []
    for z in range(k):
      if mask[i, z].any():
        log_spans = span[i, z, mask[i, z]] - logsumexp(span[i, z, mask[i, z]])
        total += list(log_blocks[i, z] + log_spans[correct[i, z, mask[i, z]]])
    expected.append(-logsumexp(total) if total else 0.0)
  np.testing.assert_allclose(parts["reader_loss"], expected, atol=1e-5)
  assert expected[2] == 0.0 and min(expected[:2]) > 0
  _, joint = losses.open_qa_loss(retriever, np.zeros((b, 5), bool), span, correct)
  assert np.abs(joint["reader_loss"][:2] - parts["reader_loss"][:2]).min() > 1e-3
  shifted = span + np.where(mask, np.arange(k, dtype=np.float32)[None, :, None] * 5.0, 0.0)
  _, invariant = losses.open_qa_loss(retriever, np.zeros((b, 5), bool), shifted.astype(
      np.float32), correct, span_normalization="per_document")
  np.testing.assert_allclose(invariant["reader_loss"], parts["reader_loss"], atol=1e-4)
  _finite_gradients(lambda r, x: losses.open_qa_loss(
      r, np.zeros((b, 5), bool), x, correct, span_normalization="per_document")[0],
      retriever, span)


def test_correct_spans():
  starts = np.array([0, 1, 2, 0, 1], np.int32)
  ends = np.array([0, 1, 2, 1, 2], np.int32)
  gold_starts = np.array([[[1, -1], [0, 2]]], np.int32)
  gold_ends = np.array([[[2, -1], [0, 2]]], np.int32)
  correct = losses.correct_spans(starts, ends, gold_starts, gold_ends).numpy()
  np.testing.assert_array_equal(correct, [[[0, 0, 0, 0, 1], [1, 0, 1, 0, 0]]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_retriever_gradient_is_posterior_minus_prior(seed):
  """REALM §3.3 / Appendix A: d log p(y|x) / d f(x,z) = p(z|y,x) - p(z|x), per masked token, so the loss
  gradient is Σ_j w_j (p(z|y_j,x) - p(z|x)) / Σ w; padded candidates get none."""
  rng = np.random.default_rng(seed)
  b, k, m, v = 3, 5, 4, 11
  relevance = rng.normal(scale=3.0, size=(b, k)).astype(np.float32)
  relevance[0, -2:] = -1e9  # candidates the index could not fill
  logits = rng.normal(scale=2.0, size=(b, k, m, v)).astype(np.float32)
  ids = rng.integers(0, v, (b, m)).astype(np.int32)
  weights = (rng.random((b, m)) < 0.7).astype(np.float32)
  weights[:, 0] = 1.0
  f = tf.Variable(relevance)
  with tf.GradientTape() as tape:
    loss, token_log_probs = losses.marginal_mlm_loss(f, logits, ids, weights)
    log_likelihood = -loss * weights.sum()  # Σ_j w_j log p(y_j|x)
  gradient = tape.gradient(log_likelihood, f).numpy()
  log_prior = log_softmax(relevance.astype(np.float64), -1)  # log p(z|x)  [B, K]
  prior = np.exp(log_prior)
  joint = log_prior[:, :, None] + token_log_probs.numpy()  # [B, K, M]
  posterior = np.exp(joint - logsumexp(joint, axis=1, keepdims=True))  # p(z|y_j,x)
  expected = ((posterior - prior[:, :, None]) * weights[:, None, :]).sum(-1)
  np.testing.assert_allclose(gradient, expected, atol=1e-5)
  np.testing.assert_allclose(gradient[0, -2:], 0.0, atol=1e-12)
  np.testing.assert_allclose(gradient.sum(-1), 0.0, atol=1e-5)  # mass moves, never appears
