"""Packs one or two segments of wordpiece ids into fixed-length BERT inputs.

Dimension legend: B batch, T wordpieces of a segment, L packed length (`seq_length`).
"""
from typing import Dict

import tensorflow as tf
import tensorflow_text as tf_text

from realm_tf.keras import keras

_TRIMMERS = {"waterfall": tf_text.WaterfallTrimmer, "round_robin": tf_text.RoundRobinTrimmer}


def padded_length(packed_length: int, multiple: int, seq_length: int) -> int:
  """A batch whose longest packed sequence has `packed_length` wordpieces, padded for length
  bucketing: rounded up to a multiple of `multiple`, at most `seq_length`."""
  return min(seq_length, -(-min(seq_length, packed_length) // multiple) * multiple)


def pack_segments(segments, seq_length, cls_id: int, sep_id: int, pad_id: int = 0,
                  truncation: str = "waterfall") -> Dict[str, tf.Tensor]:
  """The packing of `BertPacker` as a function: a list of one or two int RaggedTensors
  [B, (T)] -> int32 [B, L] "input_word_ids", "input_mask", "input_type_ids". `seq_length`
  (L) may be a scalar int32 Tensor (the TF Hub preprocessor's `bert_pack_inputs` takes it)."""
  segments = [tf.cast(s, tf.int32) for s in segments]
  budget = seq_length - 1 - len(segments)  # room left after [CLS] and one [SEP] each
  trimmed = _TRIMMERS[truncation](budget).trim(segments)
  word_ids, type_ids = tf_text.combine_segments(
      trimmed, start_of_sequence_id=cls_id, end_of_segment_id=sep_id)
  word_ids, mask = tf_text.pad_model_inputs(word_ids, seq_length, pad_value=pad_id)
  type_ids, _ = tf_text.pad_model_inputs(type_ids, seq_length, pad_value=0)
  return {
      "input_word_ids": tf.cast(word_ids, tf.int32),
      "input_mask": tf.cast(mask, tf.int32),
      "input_type_ids": tf.cast(type_ids, tf.int32),
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
    if truncation not in _TRIMMERS:
      raise ValueError(f"truncation must be one of {sorted(_TRIMMERS)}, got {truncation!r}")
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
