"""Masked-LM masking as graph ops: salient spans (REALM), the random ablations, SpanBERT's.

Every function takes packed `input_word_ids` [B, L] (or [L]) and returns, for M =
max_predictions: "input_word_ids" int32 [B, L] (the chosen positions set to `mask_id`: no
80/10/10 replacement, as in REALM), "masked_lm_positions" int32 [B, M] (ascending) and
"masked_lm_ids" int32 [B, M] (the original ids), both padded with 0, and "masked_lm_weights"
float32 [B, M] (1 on real predictions, 0 on padding). Positions whose id is in `special_ids`
(pass at least [PAD], [CLS], [SEP]) are never masked.

A row whose span cannot be masked comes back unchanged with all-zero weights instead of failing
the pipeline (count them with `reduce_max(masked_lm_weights, -1) == 0`), and so does a salient
span longer than M, never truncated: masking part of an entity would leave the rest as a
clue. The random variants are stateless, deterministic in `seed` (int or int [2]); inside
`tf.data`, derive a per-example seed, e.g. from `Dataset.enumerate()`.
"""
from typing import Callable, Dict, Sequence

import tensorflow as tf

MaskedFeatures = Dict[str, tf.Tensor]


def _one_or_batch(fn: Callable[..., MaskedFeatures], input_word_ids, *row_args,
                  **kwargs) -> MaskedFeatures:
  """Runs `fn` on a [B, L] batch; a single example [L] (with scalar `row_args`) is run as a
  batch of one and squeezed back."""
  input_word_ids = tf.convert_to_tensor(input_word_ids)
  if input_word_ids.shape.rank == 1:
    row_args = [tf.convert_to_tensor(a)[tf.newaxis] for a in row_args]
    features = fn(input_word_ids[tf.newaxis], *row_args, **kwargs)
    return {name: value[0] for name, value in features.items()}
  if input_word_ids.shape.rank != 2:
    raise ValueError(f"input_word_ids must be [B, L] or [L], got shape {input_word_ids.shape}")
  return fn(input_word_ids, *row_args, **kwargs)


def _maskable(input_word_ids: tf.Tensor, special_ids: Sequence[int]) -> tf.Tensor:
  """bool [B, L]: positions whose id is not special."""
  special = tf.constant(list(special_ids), dtype=input_word_ids.dtype)
  is_special = tf.reduce_any(tf.equal(input_word_ids[..., tf.newaxis], special), axis=-1)
  return tf.logical_not(is_special)


def _seed(seed) -> tf.Tensor:
  seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
  return tf.stack([seed, tf.zeros_like(seed)]) if seed.shape.rank == 0 else seed


def _apply_mask(input_word_ids: tf.Tensor, selected: tf.Tensor, mask_id: int,
                max_predictions: int) -> MaskedFeatures:
  """Masks the `selected` positions (bool [B, L], at most M per row) and lists them."""
  input_word_ids = tf.cast(input_word_ids, tf.int32)
  seq_length = tf.shape(input_word_ids)[1]
  positions = tf.range(seq_length)[tf.newaxis, :]  # [1, L]
  # Selected positions sort first (ascending), then the rest; M sentinel columns keep the
  # top-M well defined when L < M.
  sort_keys = tf.where(selected, positions, positions + seq_length)  # [B, L]
  sort_keys = tf.pad(sort_keys, [[0, 0], [0, max_predictions]], constant_values=2 * seq_length)
  order = -tf.math.top_k(-sort_keys, k=max_predictions, sorted=True).values  # [B, M]
  is_real = order < seq_length
  masked_positions = tf.where(is_real, order, 0)
  masked_ids = tf.where(is_real, tf.gather(input_word_ids, masked_positions, batch_dims=1), 0)
  return {
      "input_word_ids": tf.where(selected, tf.constant(mask_id, tf.int32), input_word_ids),
      "masked_lm_positions": masked_positions,
      "masked_lm_ids": masked_ids,
      "masked_lm_weights": tf.cast(is_real, tf.float32),
  }


def _salient_span_mask(input_word_ids, span_start, span_end, *, mask_id, special_ids,
                       max_predictions):
  positions = tf.range(tf.shape(input_word_ids)[1])[tf.newaxis, :]  # [1, L]
  span_start = tf.cast(span_start, tf.int32)[:, tf.newaxis]  # [B, 1]
  span_end = tf.cast(span_end, tf.int32)[:, tf.newaxis]
  in_span = tf.logical_and(positions >= span_start, positions <= span_end)  # [B, L]
  maskable = _maskable(input_word_ids, special_ids)
  span_length = span_end - span_start + 1  # [B, 1]
  valid = tf.logical_and(
      tf.logical_and(span_length >= 1, span_length <= max_predictions),
      tf.logical_and(span_start >= 0, span_end < tf.shape(input_word_ids)[1]))
  valid = tf.logical_and(valid, tf.reduce_all(tf.logical_or(~in_span, maskable), axis=-1,
                                              keepdims=True))
  return _apply_mask(input_word_ids, tf.logical_and(in_span, valid), mask_id, max_predictions)


def salient_span_mask(input_word_ids, span_start, span_end, *, mask_id: int,
                      special_ids: Sequence[int], max_predictions: int = 10) -> MaskedFeatures:
  """Masks every wordpiece of one span per row (REALM salient span masking).

  A span is rejected (row unchanged, weights 0) when it is empty (end < start), longer than M,
  reaches outside [0, L) or covers a special id.

  Args:
    input_word_ids: int Tensor [B, L] (or [L]) of packed ids.
    span_start: int Tensor [B] (or scalar), first wordpiece position of the span.
    span_end: int Tensor [B] (or scalar), last wordpiece position of the span (inclusive).
    mask_id: id of `[MASK]`.
    special_ids: ids never masked ([PAD], [CLS], [SEP], ...).
    max_predictions: M.

  Returns:
    the masked-features dict described in the module docstring.
  """
  return _one_or_batch(_salient_span_mask, input_word_ids, span_start, span_end,
                       mask_id=mask_id, special_ids=special_ids,
                       max_predictions=max_predictions)


def _random_token_mask(input_word_ids, *, mask_id, special_ids, seed, mask_rate,
                       max_predictions):
  maskable = _maskable(input_word_ids, special_ids)  # [B, L]
  num_maskable = tf.reduce_sum(tf.cast(maskable, tf.float32), axis=-1, keepdims=True)
  num_to_mask = tf.minimum(tf.cast(max_predictions, tf.float32),
                           tf.maximum(1.0, tf.round(num_maskable * mask_rate)))  # [B, 1]
  noise = tf.random.stateless_uniform(tf.shape(input_word_ids), seed=_seed(seed))
  noise = tf.where(maskable, noise, 2.0)  # unmaskable positions rank last
  rank = tf.argsort(tf.argsort(noise, axis=-1, stable=True), axis=-1, stable=True)
  selected = tf.logical_and(maskable, tf.cast(rank, tf.float32) < num_to_mask)
  return _apply_mask(input_word_ids, selected, mask_id, max_predictions)


def random_token_mask(input_word_ids, *, mask_id: int, special_ids: Sequence[int], seed,
                      mask_rate: float = 0.15, max_predictions: int = 10) -> MaskedFeatures:
  """Masks a random `mask_rate` of the maskable wordpieces of each row (BERT-style ablation).

  Each row masks min(M, max(1, round(mask_rate * maskable))) positions drawn uniformly without
  replacement; a row with no maskable position gets weights 0.

  Args:
    input_word_ids: int Tensor [B, L] (or [L]) of packed ids.
    mask_id: id of `[MASK]`.
    special_ids: ids never masked.
    seed: int or int Tensor [2] for the stateless sampler.
    mask_rate: fraction of maskable wordpieces to mask.
    max_predictions: M.

  Returns:
    the masked-features dict described in the module docstring.
  """
  return _one_or_batch(_random_token_mask, input_word_ids, mask_id=mask_id,
                       special_ids=special_ids, seed=seed, mask_rate=mask_rate,
                       max_predictions=max_predictions)


def _random_span_mask(input_word_ids, *, mask_id, special_ids, seed, max_predictions):
  maskable = _maskable(input_word_ids, special_ids)  # [B, L]
  seq_length = tf.shape(input_word_ids)[1]
  batch_size = tf.shape(input_word_ids)[0]
  seeds = tf.random.experimental.stateless_split(_seed(seed), num=2)
  # fits[b, w-1, s]: the span of width w starting at s is inside [0, L) and all maskable.
  cumulative = tf.pad(tf.cumsum(tf.cast(maskable, tf.int32), axis=-1), [[0, 0], [1, 0]])
  widths = tf.range(1, max_predictions + 1)  # [M]
  starts = tf.range(seq_length)  # [L]
  ends = tf.minimum(starts[tf.newaxis, :] + widths[:, tf.newaxis], seq_length)  # [M, L]
  count = tf.gather(cumulative, ends, axis=1) - cumulative[:, tf.newaxis, :-1]  # [B, M, L]
  fits = tf.equal(count, widths[tf.newaxis, :, tf.newaxis])  # [B, M, L]
  widest = tf.reduce_sum(tf.cast(tf.reduce_any(fits, axis=-1), tf.int32), axis=-1)  # [B]
  drawn = tf.random.stateless_uniform([batch_size], seed=seeds[0], minval=1,
                                      maxval=max_predictions + 1, dtype=tf.int32)
  width = tf.minimum(drawn, widest)  # [B]; 0 when nothing is maskable
  fits_width = tf.gather(fits, tf.maximum(width - 1, 0), axis=1, batch_dims=1)  # [B, L]
  noise = tf.random.stateless_uniform([batch_size, seq_length], seed=seeds[1])
  start = tf.argmax(tf.where(fits_width, noise, -1.0), axis=-1, output_type=tf.int32)
  return _salient_span_mask(input_word_ids, start, start + width - 1, mask_id=mask_id,
                            special_ids=special_ids, max_predictions=max_predictions)


def random_span_mask(input_word_ids, *, mask_id: int, special_ids: Sequence[int], seed,
                     max_predictions: int = 10) -> MaskedFeatures:
  """Masks one random contiguous span per row (random-span ablation).

  The width is drawn uniformly from 1..M (cut to the longest run of maskable wordpieces), the
  start uniformly among the positions where a span of that width is all maskable; a row with
  no maskable position gets weights 0.

  Args:
    input_word_ids: int Tensor [B, L] (or [L]) of packed ids.
    mask_id: id of `[MASK]`.
    special_ids: ids never masked.
    seed: int or int Tensor [2] for the stateless sampler.
    max_predictions: M.

  Returns:
    the masked-features dict described in the module docstring.
  """
  return _one_or_batch(_random_span_mask, input_word_ids, mask_id=mask_id,
                       special_ids=special_ids, seed=seed, max_predictions=max_predictions)


def span_lengths(shape, seed, p: float = 0.2, max_words: int = 10) -> tf.Tensor:
  """int32 `shape` [B, N] of SpanBERT span lengths in words: Geo(p) clipped to 1..max_words,
  P(l) ∝ p (1 - p)^(l - 1) renormalised (mean 3.8 at p = 0.2), stateless in `seed`."""
  if not 0 < p < 1 or max_words < 1:
    raise ValueError(f"span lengths need 0 < p < 1 and max_words >= 1, got p={p}, "
                     f"max_words={max_words}: pass SpanBERT's p=0.2, max_words=10")
  logits = tf.range(max_words, dtype=tf.float32) * tf.math.log(1.0 - p)  # [max_words]
  logits = tf.tile(logits[tf.newaxis], [shape[0], 1])
  drawn = tf.random.stateless_categorical(logits, shape[1], seed=_seed(seed), dtype=tf.int32)
  return drawn + 1


def _spanbert_mask(input_word_ids, *, mask_id, special_ids, continuation, seed, mask_rate,
                   max_predictions, p, max_span_words):
  input_word_ids = tf.cast(input_word_ids, tf.int32)
  maskable = _maskable(input_word_ids, special_ids)  # [B, L]
  batch_size, seq_length = tf.shape(input_word_ids)[0], tf.shape(input_word_ids)[1]
  # Words: a maskable wordpiece that is not "##", or follows an unmaskable one, starts one.
  is_continuation = tf.gather(tf.constant(continuation, tf.bool), input_word_ids)
  after_maskable = tf.pad(maskable[:, :-1], [[0, 0], [1, 0]])
  word_start = tf.logical_and(maskable, ~tf.logical_and(is_continuation, after_maskable))
  word_of = tf.cumsum(tf.cast(word_start, tf.int32), axis=-1) - 1  # [B, L], a row's W <= L
  rows = tf.range(batch_size)[:, tf.newaxis] * seq_length
  segments = tf.where(maskable, word_of + rows, batch_size * seq_length)
  word_length = tf.reshape(tf.math.unsorted_segment_sum(
      tf.ones_like(segments), segments, batch_size * seq_length + 1)[:-1],
                           [batch_size, seq_length])  # [B, W] wordpieces of each word
  is_word = word_length > 0
  num_maskable = tf.reduce_sum(tf.cast(maskable, tf.float32), axis=-1)
  budget = tf.cast(tf.minimum(tf.cast(max_predictions, tf.float32),
                              tf.maximum(1.0, tf.round(num_maskable * mask_rate))), tf.int32)
  seeds = tf.random.experimental.stateless_split(_seed(seed), num=2)
  lengths = span_lengths([batch_size, max_predictions], seeds[0], p, max_span_words)  # [B, M]
  noise = tf.random.stateless_uniform([batch_size, max_predictions, seq_length], seed=seeds[1])
  words = tf.range(seq_length)[tf.newaxis, :]  # [1, W]

  def free_and_active(masked, count):
    """The unmasked words that fit under M [B, W], and the rows still under budget that
    have one [B, 1]."""
    free = is_word & ~masked & (word_length <= (max_predictions - count)[:, tf.newaxis])
    return free, tf.logical_and(count < budget, tf.reduce_any(free, axis=-1))[:, tf.newaxis]

  def span(step, masked, count):
    """Masks one span of whole words from a random free word in each active row (>= 1
    wordpiece each, so at most M steps)."""
    free, active = free_and_active(masked, count)
    start = tf.argmax(tf.where(free, noise[:, step], -1.0), axis=-1,
                      output_type=tf.int32)[:, tf.newaxis]  # [B, 1]
    window = (words >= start) & (words < start + lengths[:, step:step + 1])
    blocked = tf.cumsum(tf.cast(window & (masked | ~is_word), tf.int32), axis=-1) > 0
    through = count[:, tf.newaxis] + tf.cumsum(tf.where(window, word_length, 0), axis=-1)
    # The budget cut: a word is added while the count before it is under budget (the last
    # word may overshoot by its own length - 1), never past M, never over a masked word.
    take = (window & ~blocked & active & (through - word_length < budget[:, tf.newaxis])
            & (through <= max_predictions))
    count += tf.reduce_sum(tf.where(take, word_length, 0), axis=-1)
    return step + 1, masked | take, count

  _, masked, _ = tf.while_loop(
      lambda step, masked, count: tf.logical_and(
          step < max_predictions, tf.reduce_any(free_and_active(masked, count)[1])), span,
      (tf.constant(0), tf.zeros([batch_size, seq_length], tf.bool), tf.zeros_like(budget)))
  selected = maskable & tf.gather(masked, tf.maximum(word_of, 0), batch_dims=1)
  return _apply_mask(input_word_ids, selected, mask_id, max_predictions)


def spanbert_mask(input_word_ids, *, mask_id: int, special_ids: Sequence[int],
                  continuation: Sequence[bool], seed, mask_rate: float = 0.15,
                  max_predictions: int = 10, p: float = 0.2,
                  max_span_words: int = 10) -> MaskedFeatures:
  """Masks SpanBERT's random spans of whole words until `mask_rate` of each row is masked.

  The budget is min(M, max(1, round(mask_rate * maskable))) wordpieces, as
  `random_token_mask`'s. Until a row reaches it: draw a length l in words (`span_lengths`),
  a start word uniformly among the unmasked words that fit under M, and mask up to l whole
  words from it, stopping at the row's end, before an already masked word (spans never
  overlap), before a word that would pass M, and once the budget is reached: a word is added
  while the count before it is under budget, so the last word is kept whole and a row ends
  with budget to budget + (its last word's wordpieces - 1) (fewer only when no unmasked word
  fits under M). A word is a maskable wordpiece that is not a "##" continuation, or follows an
  unmaskable one, and the continuations after it. No 80/10/10 replacement, as everywhere here.

  Args:
    input_word_ids: int Tensor [B, L] (or [L]) of packed ids.
    mask_id: id of `[MASK]`.
    special_ids: ids never masked.
    continuation: bool [V], the wordpiece of each id is a "##" continuation
      (`WordpieceTokenizer.continuation`).
    seed: int or int Tensor [2] for the stateless sampler.
    mask_rate: fraction of maskable wordpieces to mask.
    max_predictions: M.
    p, max_span_words: the span-length distribution (SpanBERT: 0.2, 10).

  Returns:
    the masked-features dict described in the module docstring.
  """
  return _one_or_batch(_spanbert_mask, input_word_ids, mask_id=mask_id,
                       special_ids=special_ids, continuation=continuation, seed=seed,
                       mask_rate=mask_rate, max_predictions=max_predictions, p=p,
                       max_span_words=max_span_words)


def wordpiece_span(token_starts, token_ends, span_begin, span_end, offset: int = 1):
  """Maps a byte span of the text to inclusive wordpiece positions in the packed input.

  Use it to turn NER/date character spans into `salient_span_mask` arguments, with offsets
  from `WordpieceTokenizer.tokenize_with_offsets` (convert character offsets of a Python
  string to UTF-8 byte offsets first).

  Args:
    token_starts: int RaggedTensor [B, (T)] (or Tensor [T]), first byte of each wordpiece.
    token_ends: int RaggedTensor [B, (T)] (or Tensor [T]), end byte (exclusive).
    span_begin: int Tensor [B] (or scalar), first byte of the span.
    span_end: int Tensor [B] (or scalar), end byte of the span (exclusive).
    offset: position of the first wordpiece in the packed input (1 after `[CLS]`).

  Returns:
    (start, end): int32 Tensors [B] (or scalars), the first and last wordpiece overlapping the
    span plus `offset`; (-1, -2) when no wordpiece overlaps, which `salient_span_mask` rejects.
  """
  unbatched = not isinstance(token_starts, tf.RaggedTensor)
  if unbatched:
    token_starts = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(token_starts)[tf.newaxis])
    token_ends = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(token_ends)[tf.newaxis])
    span_begin = tf.convert_to_tensor(span_begin)[tf.newaxis]
    span_end = tf.convert_to_tensor(span_end)[tf.newaxis]
  token_starts = tf.cast(token_starts, tf.int32).to_tensor(default_value=tf.int32.max)
  token_ends = tf.cast(token_ends, tf.int32).to_tensor(default_value=tf.int32.min)
  span_begin = tf.cast(span_begin, tf.int32)[:, tf.newaxis]
  span_end = tf.cast(span_end, tf.int32)[:, tf.newaxis]
  overlaps = tf.logical_and(token_starts < span_end, token_ends > span_begin)  # [B, T]
  any_overlap = tf.reduce_any(overlaps, axis=-1)  # [B]
  num_tokens = tf.shape(overlaps)[1]
  positions = tf.range(num_tokens)[tf.newaxis, :]
  first = tf.reduce_min(tf.where(overlaps, positions, num_tokens), axis=-1)
  last = tf.reduce_max(tf.where(overlaps, positions, -1), axis=-1)
  start = tf.where(any_overlap, first + offset, -1)
  end = tf.where(any_overlap, last + offset, -2)
  if unbatched:
    return start[0], end[0]
  return start, end
