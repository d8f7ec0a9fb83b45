"""Inputs no longer than their text: a batch cut to its longest row, rows encoded by length.

N rows, L padded length, H hidden. Answering pads questions to `query_length` and reader inputs
to `reader_length`, but an NQ question is ~10 wordpieces and a block far below its limit, so
most of a padded forward multiplies padding. `trim_batch` cuts a batch to its longest row;
`bucketed_sequence_output` runs the encoder once per length bucket (each row's real length
rounded up to `multiple`), inside one `tf.while_loop`, so one trace serves every batch and the
buckets present in it. Padding changes no real position's output (attention masks it), so both
equal the padded computation at every real position (tests/length_buckets_test.py); positions
past a row's bucket are 0. `multiple=0` keeps the padded, static shapes (XLA, TPUs).
"""
from typing import Callable, Dict

import tensorflow as tf

Features = Dict[str, tf.Tensor]


def bucket_lengths(lengths: tf.Tensor, multiple: int, limit: tf.Tensor) -> tf.Tensor:
  """int [N] real lengths -> rounded up to a multiple of `multiple`, at most `limit`."""
  return tf.minimum((lengths + multiple - 1) // multiple * multiple, limit)


def trim_batch(features: Features, multiple: int) -> Features:
  """{name: [N, L]} -> {name: [N, L']}, L' the longest row ("input_mask") rounded up to
  `multiple` (`multiple=0`: unchanged)."""
  if not multiple:
    return features
  mask = features["input_mask"]
  longest = tf.reduce_max(tf.concat([tf.reduce_sum(tf.cast(mask, tf.int32), axis=1), [1]], 0))
  length = bucket_lengths(longest, multiple, tf.shape(mask)[1])
  return {name: value[:, :length] for name, value in features.items()}


def bucketed_sequence_output(encode: Callable[[Features], tf.Tensor], features: Features,
                             multiple: int, hidden_size: int, dtype: tf.DType) -> tf.Tensor:
  """`encode` ({name: [n, l]} -> [n, l, H], H = `hidden_size`, cast to `dtype`) over the rows
  of `features` [N, L], one call per length bucket present (module docstring).

  Returns:
    [N, L, H]: each row's output at its first `bucket` positions, 0 after.
  """
  mask = features["input_mask"]
  length = tf.shape(mask)[1]
  buckets = bucket_lengths(tf.reduce_sum(tf.cast(mask, tf.int32), axis=1), multiple, length)
  sizes, bucket_of_row = tf.unique(buckets)
  outputs = tf.TensorArray(dtype, size=tf.size(sizes), infer_shape=False,
                           element_shape=tf.TensorShape([None, None, hidden_size]))
  rows = tf.TensorArray(tf.int32, size=tf.size(sizes), infer_shape=False)

  def body(i, outputs, rows):
    members = tf.cast(tf.reshape(tf.where(tf.equal(bucket_of_row, i)), [-1]), tf.int32)
    size = sizes[i]
    part = {name: tf.gather(value, members)[:, :size] for name, value in features.items()}
    hidden = tf.cast(encode(part), dtype)  # [n, size, H]
    hidden = tf.pad(hidden, [[0, 0], [0, length - size], [0, 0]])
    return i + 1, outputs.write(i, hidden), rows.write(i, members)

  _, outputs, rows = tf.while_loop(lambda i, *_: i < tf.size(sizes), body,
                                   (tf.constant(0), outputs, rows))
  hidden = outputs.concat()  # [N, L, H], bucket by bucket
  return tf.gather(hidden, tf.math.invert_permutation(rows.concat()))
