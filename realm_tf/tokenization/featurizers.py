"""REALM input featurizers: evidence blocks, queries and reader inputs.

Dimension legend: B batch, T wordpieces of a segment, L packed length.

- block: `[CLS] title [SEP] body [SEP]`, L = 288, the title has priority (waterfall truncation);
  types 0 for `[CLS] title [SEP]`, 1 for `body [SEP]`.
- query: `[CLS] x [SEP]`, L = 96 in pre-training (64 for ICT).
- reader: `[CLS] x [SEP] z_body [SEP]` (the block title is not read), L = 384 = 96 + 288 in
  pre-training and 320 in fine-tuning. The query has priority (waterfall), so the wordpieces of
  a query packed at a length <= L - 1 keep their positions and its `masked_lm_positions` stay
  valid in the reader input; with 96 + 288 the body of a 288-block is never cut either.

All three are Keras layers that run inside `tf.data.Dataset.map`, batched or on single
examples. To read K blocks per query, flatten the candidates to B*K rows and repeat the query
ids (`tf.gather(query_ids, tf.repeat(tf.range(B), K))`).
"""
from typing import Dict

import tensorflow as tf

from realm_tf.keras import keras
from realm_tf.tokenization.bert_packer import BertPacker
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


class _Featurizer(keras.layers.Layer):
  """A tokenizer plus a waterfall `BertPacker` of length `seq_length`."""

  def __init__(self, tokenizer: WordpieceTokenizer, seq_length: int, **kwargs):
    kwargs.setdefault("trainable", False)
    kwargs.setdefault("dtype", "int32")
    super().__init__(**kwargs)
    self.tokenizer = tokenizer
    self.seq_length = int(seq_length)
    self.packer = BertPacker(seq_length=self.seq_length, cls_id=tokenizer.cls_id,
                             sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id,
                             truncation="waterfall")

  def get_config(self):
    config = super().get_config()
    config.update({"tokenizer": keras.layers.serialize(self.tokenizer),
                   "seq_length": self.seq_length})
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["tokenizer"] = keras.layers.deserialize(config["tokenizer"])
    return cls(**config)


@keras.utils.register_keras_serializable(package="realm_tf")
class BlockFeaturizer(_Featurizer):
  """(titles, bodies) -> `[CLS] title [SEP] body [SEP]` features, title first.

  Args:
    tokenizer: the `WordpieceTokenizer`.
    seq_length: L (REALM: 288).
    **kwargs: Keras layer arguments.
  """

  def __init__(self, tokenizer: WordpieceTokenizer, seq_length: int = 288, **kwargs):
    super().__init__(tokenizer, seq_length, **kwargs)

  def call(self, inputs) -> Dict[str, tf.Tensor]:
    """Featurizes blocks.

    Args:
      inputs: (titles, bodies), string Tensors [B] or scalars.

    Returns:
      dict of int32 Tensors [B, L] ([L] for scalars): "input_word_ids", "input_mask",
      "input_type_ids".
    """
    titles, bodies = inputs
    return self.packer((self.tokenizer(titles), self.tokenizer(bodies)))


@keras.utils.register_keras_serializable(package="realm_tf")
class QueryFeaturizer(_Featurizer):
  """strings -> `[CLS] x [SEP]` features.

  Args:
    tokenizer: the `WordpieceTokenizer`.
    seq_length: L (REALM pre-training: 96; ICT: 64).
    **kwargs: Keras layer arguments.
  """

  def __init__(self, tokenizer: WordpieceTokenizer, seq_length: int = 96, **kwargs):
    super().__init__(tokenizer, seq_length, **kwargs)

  def call(self, strings) -> Dict[str, tf.Tensor]:
    """Featurizes queries.

    Args:
      strings: string Tensor [B] or a scalar.

    Returns:
      dict of int32 Tensors [B, L] ([L] for a scalar): "input_word_ids", "input_mask",
      "input_type_ids".
    """
    return self.packer(self.tokenizer(strings))


@keras.utils.register_keras_serializable(package="realm_tf")
class ReaderFeaturizer(keras.layers.Layer):
  """(query ids, block body ids) -> `[CLS] x [SEP] z_body [SEP]` features plus `block_mask`.

  Works on ids, not text: the query may already carry `[MASK]`s and the bodies come from the
  block store (see `block_body_ids`).

  Args:
    cls_id: id of `[CLS]`.
    sep_id: id of `[SEP]`.
    pad_id: id of `[PAD]`.
    seq_length: L (REALM pre-training: 384; fine-tuning: 320).
    **kwargs: Keras layer arguments.
  """

  def __init__(self, cls_id: int, sep_id: int, pad_id: int = 0, seq_length: int = 384,
               **kwargs):
    kwargs.setdefault("trainable", False)
    kwargs.setdefault("dtype", "int32")
    super().__init__(**kwargs)
    self.packer = BertPacker(seq_length=seq_length, cls_id=cls_id, sep_id=sep_id,
                             pad_id=pad_id, truncation="waterfall")

  @classmethod
  def from_tokenizer(cls, tokenizer: WordpieceTokenizer, seq_length: int = 384,
                     **kwargs) -> "ReaderFeaturizer":
    return cls(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id,
               seq_length=seq_length, **kwargs)

  def call(self, inputs) -> Dict[str, tf.Tensor]:
    """Packs reader inputs.

    Args:
      inputs: (query_ids, body_ids), int RaggedTensors [B, (T)] (or Tensors [T] for one
        example); `query_ids` without `[CLS]`/`[SEP]`.

    Returns:
      dict of int32 Tensors [B, L] ([L] for one example): "input_word_ids", "input_mask",
      "input_type_ids" and "block_mask", which is 1 exactly on the z_body wordpieces (where an
      answer span may start and end) and 0 on the query, the specials and padding.
    """
    query_ids, body_ids = inputs
    features = self.packer((query_ids, body_ids))
    positions = tf.range(self.packer.seq_length)  # [L]
    last = tf.reduce_sum(features["input_mask"], axis=-1, keepdims=True) - 1  # [B, 1]: [SEP]
    in_body = tf.logical_and(tf.equal(features["input_type_ids"], 1), positions < last)
    features["block_mask"] = tf.cast(in_body, tf.int32)
    return features

  def get_config(self):
    config = super().get_config()
    config.update({
        "cls_id": self.packer.cls_id,
        "sep_id": self.packer.sep_id,
        "pad_id": self.packer.pad_id,
        "seq_length": self.packer.seq_length,
    })
    return config


def block_body_ids(input_word_ids: tf.Tensor, input_type_ids: tf.Tensor,
                   input_mask: tf.Tensor) -> tf.RaggedTensor:
  """Recovers the body wordpieces from packed block features (drops CLS, title and [SEP]s).

  Args:
    input_word_ids: int Tensor [B, L] of `[CLS] title [SEP] body [SEP]` blocks.
    input_type_ids: int Tensor [B, L], 1 on `body [SEP]`.
    input_mask: int Tensor [B, L], 1 on real tokens.

  Returns:
    RaggedTensor [B, (T)] of body ids, of the dtype of `input_word_ids`.
  """
  in_segment = tf.logical_and(tf.equal(input_type_ids, 1), tf.equal(input_mask, 1))
  body_and_sep = tf.ragged.boolean_mask(input_word_ids, in_segment)  # [B, (T + 1)]
  return body_and_sep[:, :-1]
