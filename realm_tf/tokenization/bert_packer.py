"""Packs one or two segments of wordpiece ids into fixed-length BERT inputs.

The packing is index arithmetic over the segments' flat values (a few dozen graph ops), with
the truncation rules of tensorflow-text's `WaterfallTrimmer` and `RoundRobinTrimmer` and the
layout of its `combine_segments` + `pad_model_inputs` (tests check it against them): those
build mostly ragged validation ops, which every trace of a function that packs inputs paid.

Dimension legend: B batch, T wordpieces of a segment, L packed length (`seq_length`).
"""
from typing import Dict, List

import tensorflow as tf

from realm_tf.keras import keras

TRUNCATIONS = ("waterfall", "round_robin")


def padded_length(packed_length: int, multiple: int, seq_length: int) -> int:
  """A batch whose longest packed sequence has `packed_length` wordpieces, padded for length
  bucketing: rounded up to a multiple of `multiple`, at most `seq_length`."""
  return min(seq_length, -(-min(seq_length, packed_length) // multiple) * multiple)


def kept_lengths(lengths: List[tf.Tensor], budget, truncation: str) -> List[tf.Tensor]:
  """How many wordpieces of each segment (int64 [B] lengths) fit in `budget`: "waterfall"
  fills the first segment first; "round_robin" deals one wordpiece to each segment in turn,
  the first segment first."""
  budget = tf.maximum(tf.cast(budget, tf.int64), 0)
  if len(lengths) == 1:
    return [tf.minimum(lengths[0], budget)]
  first, second = lengths
  if truncation == "waterfall":
    keep_first = tf.minimum(first, budget)
  else:
    keep_first = tf.minimum(first, tf.maximum((budget + 1) // 2, budget - second))
  return [keep_first, tf.minimum(second, budget - keep_first)]


def pack_segments(segments, seq_length, cls_id: int, sep_id: int, pad_id: int = 0,
                  truncation: str = "waterfall") -> Dict[str, tf.Tensor]:
  """The packing of `BertPacker` as a function: a list of one or two int RaggedTensors
  [B, (T)] -> int32 [B, L] "input_word_ids", "input_mask", "input_type_ids". `seq_length`
  (L) may be a scalar int32 Tensor (the TF Hub preprocessor's `bert_pack_inputs` takes it)."""
  if truncation not in TRUNCATIONS:
    raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
  segments = [s.merge_dims(1, -1) if s.ragged_rank > 1 else s for s in segments]
  segments = [s.with_row_splits_dtype(tf.int64) for s in segments]
  kept = kept_lengths([s.row_lengths() for s in segments], seq_length - 1 - len(segments),
                      truncation)
  positions = tf.range(tf.cast(seq_length, tf.int64), dtype=tf.int64)[tf.newaxis]  # [1, L]
  word_ids = tf.where(positions == 0, tf.cast(cls_id, tf.int32), tf.cast(pad_id, tf.int32))
  type_ids = tf.zeros_like(word_ids)
  start = tf.ones_like(kept[0])[:, tf.newaxis]  # [B, 1]: where the segment begins
  for type_id, (segment, keep) in enumerate(zip(segments, kept)):
    offset = positions - start  # [B, L]
    inside = (offset >= 0) & (offset < keep[:, tf.newaxis])
    values = tf.concat([tf.cast(segment.values, tf.int32), [pad_id]], 0)  # a pad to point at
    index = tf.where(inside, segment.row_starts()[:, tf.newaxis] + offset,
                     tf.shape(values, out_type=tf.int64)[0] - 1)
    separator = offset == keep[:, tf.newaxis]
    word_ids = tf.where(inside, tf.gather(values, index), word_ids)
    word_ids = tf.where(separator, tf.cast(sep_id, tf.int32), word_ids)
    type_ids = tf.where(inside | separator, type_id, type_ids)
    start += keep[:, tf.newaxis] + 1
  mask = positions < start
  return {
      "input_word_ids": tf.where(mask, word_ids, tf.cast(pad_id, tf.int32)),
      "input_mask": tf.cast(mask, tf.int32),
      "input_type_ids": tf.where(mask, type_ids, 0),
  }


@keras.utils.register_keras_serializable(package="realm_tf")
class BertPacker(keras.layers.Layer):
  """`[CLS] x1 [SEP]` or `[CLS] x1 [SEP] x2 [SEP]`, truncated and padded to `seq_length`.

  Segment (type) ids are 0 for `[CLS] x1 [SEP]` and 1 for `x2 [SEP]`; padding has id `pad_id`,
  mask 0 and type 0. Truncation is deterministic and keeps segment prefixes:
  - "waterfall": the first segment keeps up to the whole budget, the second gets what is left
    (for blocks `[CLS] title [SEP] body [SEP]`: the title has priority);
  - "round_robin": the budget is dealt one wordpiece at a time to each segment in turn, so a
    short segment is kept whole and the longer one fills the rest.

  Inputs may be batched (RaggedTensor [B, (T)]) or a single example (Tensor [T]), e.g. inside a
  `tf.data.Dataset.map` before `batch`.

  Args:
    seq_length: L, the packed length including the special tokens.
    cls_id: id of `[CLS]`.
    sep_id: id of `[SEP]`.
    pad_id: id written on padding positions.
    truncation: "waterfall" or "round_robin".
    **kwargs: Keras layer arguments.
  """

  def __init__(self, seq_length: int, cls_id: int, sep_id: int, pad_id: int = 0,
               truncation: str = "waterfall", **kwargs):
    kwargs.setdefault("trainable", False)
    kwargs.setdefault("dtype", "int32")
    super().__init__(**kwargs)
    if truncation not in TRUNCATIONS:
      raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
    if seq_length < 3:
      raise ValueError(f"seq_length must leave room for [CLS] and two [SEP], got {seq_length}")
    self.seq_length = int(seq_length)
    self.cls_id = int(cls_id)
    self.sep_id = int(sep_id)
    self.pad_id = int(pad_id)
    self.truncation = truncation

  def call(self, inputs) -> Dict[str, tf.Tensor]:
    """Packs the segments.

    Args:
      inputs: x1, or a tuple/list (x1,) or (x1, x2); each an int RaggedTensor [B, (T)] or an int
        Tensor [T] (one example).

    Returns:
      dict of int32 Tensors [B, L] ([L] for one example): "input_word_ids", "input_mask",
      "input_type_ids".
    """
    segments = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    if not 1 <= len(segments) <= 2:
      raise ValueError(f"BertPacker takes one or two segments, got {len(segments)}")
    unbatched = not isinstance(segments[0], tf.RaggedTensor) and segments[0].shape.rank == 1
    if unbatched:
      segments = [tf.RaggedTensor.from_tensor(s[tf.newaxis]) for s in segments]
    features = pack_segments(segments, self.seq_length, self.cls_id, self.sep_id, self.pad_id,
                             self.truncation)
    if unbatched:
      return {name: value[0] for name, value in features.items()}
    return features

  def get_config(self):
    config = super().get_config()
    config.update({
        "seq_length": self.seq_length,
        "cls_id": self.cls_id,
        "sep_id": self.sep_id,
        "pad_id": self.pad_id,
        "truncation": self.truncation,
    })
    return config
