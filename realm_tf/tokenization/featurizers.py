"""REALM input featurizers: evidence blocks, queries and reader inputs.

B batch, T wordpieces of a segment, L packed length:
- block: `[CLS] title [SEP] body [SEP]`, L = 288, the title first (waterfall truncation), types
  0 then 1; or `[CLS] body [SEP]` (types 0) for a doc tower of `doc_input="body"`.
- query: `[CLS] x [SEP]`, L = 96 in pre-training (64 for ICT).
- reader: `[CLS] x [SEP] z_body [SEP]` (the title is not read), L = 384 = 96 + 288 in
  pre-training, 320 in fine-tuning. The query goes first, so a query packed at a length
  <= L - 1 keeps its positions and its `masked_lm_positions` stay valid in the reader input.

The layers run inside `tf.data.Dataset.map`, batched or not. `Featurizer` holds one of each at
the run's lengths and is what every stage featurizes with (training data, candidates,
fine-tuning, the recall monitor, serving, the TF Hub exports), from text or from wordpiece
ids alike; to read K blocks per query it flattens them to B*K rows and repeats the query.
"""
from typing import Dict, Optional

import tensorflow as tf

from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.keras import keras
from realm_tf.tokenization import answer_text
from realm_tf.tokenization import doc_input as doc_inputs
from realm_tf.tokenization.bert_packer import BertPacker
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

# The int32 [B, L] BERT inputs every `Featurizer` method packs.
FEATURES = ("input_word_ids", "input_mask", "input_type_ids")


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

  def __init__(self, tokenizer: WordpieceTokenizer, seq_length: int = BLOCK_LENGTH, **kwargs):
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
  corpus (see `block_body_ids`).

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


class Featurizer(tf.Module):
  """The one featurizer of every stage: queries, blocks and reader inputs, from text or ids.

  Pre-training (its candidates and masked queries), ICT, fine-tuning, the recall monitor,
  serving (`RetrieveAndRead`) and the TF Hub exports all featurize through it, so the trainer
  and the server build the same features for the same query and block. Text methods tokenize
  first; `pack_*` and `reader` take wordpiece ids without specials. Spans go back to text with
  `span_text`.

  Args:
    tokenizer: the `WordpieceTokenizer`.
    query_length: Lq of `[CLS] x [SEP]` (longer questions are truncated).
    block_length: Lb of `[CLS] title [SEP] body [SEP]` blocks (288); the reader reads the
      body of this packing, i.e. with "title_body" exactly the wordpieces the doc tower
      embedded.
    reader_length: Lr of `[CLS] x [SEP] z_body [SEP]`, default Lq + Lb (pre-training's 384: a
      block's body is never cut); must leave room for a body wordpiece after the longest query.
    doc_input: the doc tower's block form, "title_body" or "body" (`tokenization.doc_input`),
      that `blocks` and `pack_blocks` pack; the reader's input does not depend on it.
    name: the module name.
  """

  def __init__(self, tokenizer: WordpieceTokenizer, query_length: int = 96,
               block_length: int = BLOCK_LENGTH, reader_length: Optional[int] = None,
               doc_input: str = doc_inputs.DEFAULT_DOC_INPUT, name: str = "featurizer"):
    super().__init__(name=name)
    reader_length = query_length + block_length if reader_length is None else reader_length
    if reader_length < query_length + 2:
      raise ValueError(f"reader_length {reader_length} must be >= query_length "
                       f"{query_length} + 2 so that every question leaves room for the block")
    self.tokenizer, self.doc_input = tokenizer, doc_inputs.check(doc_input)
    self.query_length, self.block_length, self.reader_length = (
        int(query_length), int(block_length), int(reader_length))
    self.query_featurizer = QueryFeaturizer(tokenizer, seq_length=query_length)
    self.block_featurizer = BlockFeaturizer(tokenizer, seq_length=block_length)
    self.reader_featurizer = ReaderFeaturizer.from_tokenizer(tokenizer, seq_length=reader_length)
    self._wordpieces = answer_text.wordpiece_strings(tokenizer.vocabulary)  # object [V]

  # Queries -----------------------------------------------------------------------------------

  def queries(self, strings: tf.Tensor) -> Dict[str, tf.Tensor]:
    """string [B] (or a scalar) -> {name: int32 [B, Lq]} `[CLS] x [SEP]` features."""
    return self.query_featurizer(strings)

  def query_spec(self) -> Dict[str, tf.TensorSpec]:
    """The `queries` features as a `tf.function` input signature over any batch size."""
    return {name: tf.TensorSpec([None, self.query_length], tf.int32)
            for name in ("input_word_ids", "input_mask", "input_type_ids")}

  def pack_queries(self, query_ids) -> Dict[str, tf.Tensor]:
    """int [B, (T)] (or [T]) query wordpieces, e.g. masked -> {name: int32 [B, Lq]}."""
    return self.query_featurizer.packer(tf.cast(query_ids, tf.int32))

  @staticmethod
  def query_ids(features: Dict[str, tf.Tensor]) -> tf.RaggedTensor:
    """[B, Lq] `[CLS] x [SEP]` features -> [B, (T)] the wordpieces of x."""
    lengths = tf.maximum(tf.reduce_sum(features["input_mask"], axis=1) - 2, 0)
    return tf.RaggedTensor.from_tensor(features["input_word_ids"][:, 1:], lengths=lengths)

  def questions(self, questions: tf.Tensor):
    """string [B] -> (query features {name: int32 [B, Lq]}, query wordpieces [B, (T)])."""
    features = self.queries(questions)
    return features, self.query_ids(features)

  # Blocks ------------------------------------------------------------------------------------

  def blocks(self, titles: tf.Tensor, texts: tf.Tensor) -> Dict[str, tf.Tensor]:
    """string [B] titles and texts -> {name: int32 [B, Lb]} doc-tower features
    (`doc_input`'s form)."""
    if self.doc_input == "title_body":
      return self.block_featurizer((titles, texts))
    return self.pack_blocks(None, self.tokenizer(texts))

  def pack_blocks(self, title_ids, body_ids) -> Dict[str, tf.Tensor]:
    """int [B, (T)] (or [T]) title and body wordpieces -> {name: int32 [B, Lb]} doc-tower
    features (`doc_input`'s form; "body" ignores `title_ids`)."""
    return self.block_featurizer.packer(tuple(
        tf.cast(s, tf.int32) for s in doc_inputs.segments(title_ids, body_ids, self.doc_input)))

  # Reader ------------------------------------------------------------------------------------

  def reader(self, query_ids, body_ids) -> Dict[str, tf.Tensor]:
    """int [B, (T)] query and body wordpieces -> `ReaderFeaturizer` features [B, Lr]."""
    return self.reader_featurizer((tf.cast(query_ids, tf.int32), tf.cast(body_ids, tf.int32)))

  def reader_inputs(self, query_ids: tf.RaggedTensor, titles: tf.Tensor,
                    texts: tf.Tensor) -> Dict[str, tf.Tensor]:
    """Reader inputs of each question with each of its blocks.

    Args:
      query_ids: int [B, (T)] question wordpieces (no specials).
      titles, texts: string [B, k] the blocks to read.

    Returns:
      {"input_word_ids", "input_mask", "input_type_ids", "block_mask"}: int32 [B*k, Lr],
      question-major (row b*k + j is question b with its j-th block).
    """
    num_blocks = tf.shape(titles)[1]
    blocks = self.block_featurizer((tf.reshape(titles, [-1]), tf.reshape(texts, [-1])))
    body = block_body_ids(blocks["input_word_ids"], blocks["input_type_ids"],
                          blocks["input_mask"])
    rows = tf.repeat(tf.range(query_ids.nrows(out_type=tf.int32)), num_blocks)
    return self.reader(tf.gather(tf.cast(query_ids, tf.int32), rows), body)

  def span_text(self, texts: tf.Tensor, input_word_ids: tf.Tensor, block_mask: tf.Tensor,
                starts: tf.Tensor, ends: tf.Tensor) -> tf.Tensor:
    """The answer string of one span per reader input, as ORQA computes it.

    Args:
      texts: string [B] block texts.
      input_word_ids, block_mask: int [B, Lr] their reader inputs.
      starts, ends: int [B] span positions in the reader inputs (inclusive ends).

    Returns:
      string [B]: `answer_text.span_answer_text` (ORQA's `get_final_text` of the span's
      wordpieces and the original tokens of the text holding them: "cart" of "cartilage"
      reads "cart", "tor ##quin" of "Torquinton" reads "Torquinton") where the reader's body
      wordpieces are the text's tokenization; else the detokenized wordpieces.
    """
    starts = tf.cast(starts, tf.int32)
    ends = tf.cast(ends, tf.int32)
    input_word_ids = tf.cast(input_word_ids, tf.int32)
    texts = answer_text.valid_utf8(texts)
    body_start = tf.cast(tf.argmax(tf.cast(block_mask, tf.int32), axis=1), tf.int32)  # [B]
    # Dense [B, W] spans (W the widest): ragged gathers trace into thousands of graph ops.
    lengths = tf.maximum(ends - starts + 1, 0)  # [B]
    offsets = tf.range(tf.reduce_max(tf.concat([lengths, [0]], 0)))[None]  # [1, W]
    in_span = offsets < lengths[:, None]  # [B, W]
    span_ids = tf.gather(input_word_ids, tf.clip_by_value(
        starts[:, None] + offsets, 0, tf.shape(input_word_ids)[1] - 1), batch_dims=1)
    ids, byte_starts, byte_ends = self.tokenizer.tokenize_with_offsets(texts)  # [B, (T)]
    first, last = starts - body_start, ends - body_start
    num_tokens = tf.cast(ids.row_lengths(), tf.int32)
    in_range = (first >= 0) & (first <= last) & (last < num_tokens)

    def at(values, i):  # values[b, i[b]] of a ragged [B, (T)], i clipped into [0, T].
      dense = tf.pad(tf.cast(values.to_tensor(0), tf.int32), [[0, 0], [0, 1]])
      return tf.gather(dense, tf.clip_by_value(i, 0, tf.shape(dense)[1] - 1), batch_dims=1)

    text_ids = at(ids, first[:, None] + offsets)  # [B, W]
    agree = in_range & tf.reduce_all(tf.equal(text_ids, span_ids) | ~in_span, axis=1)
    pred_text = answer_text.join(tf.gather(tf.constant(self._wordpieces), span_ids), in_span)
    # A wordpiece of a decomposed character ("ᄒ" of "한") may cover no byte: it lies in the
    # original token holding its start.
    last_end = tf.maximum(at(byte_ends, last), at(byte_starts, last) + 1)
    answer, found = answer_text.span_answer_text(texts, pred_text, at(byte_starts, first),
                                                 last_end)
    detokenized = self.tokenizer.detokenize(tf.RaggedTensor.from_tensor(span_ids, lengths))
    return tf.where(agree & found, answer, detokenized)
