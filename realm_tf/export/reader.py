"""The reader (knowledge-augmented encoder) export: MLM and span heads as a TF Hub SavedModel.

N (question, block) pairs, Lr the reader length, M masked positions, V vocabulary, S spans:
  "span":      ids and block_mask int32 [N, Lr] -> {"span_logits": float32 [N, S],
               "span_starts", "span_ends": int32 [S]}
  "mlm":       ids int32 [N, L], masked_lm_positions int32 [N, M] -> {"mlm_logits" [N, M, V]}
  "read_text": questions, titles, texts string [N] -> the "span" outputs and their inputs
  "mlm_text":  queries (a literal "[MASK]" is one masked wordpiece), titles, texts [N] ->
               "mlm_logits", "masked_lm_positions", "masked_lm_weights" and the inputs
The text signatures pack `[CLS] x [SEP] z_body [SEP]` exactly as fine-tuning does, so a
user's scores are the model's. Spans are width-major, and a span leaving the block gets a
very negative logit. `hub.KerasLayer(path, trainable=True)` fine-tunes the reader.
docs/exports.md has the details.
"""
import tempfile

import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.models.reader import Reader
from realm_tf.signatures.doc_embedder import Untracked
from realm_tf.signatures.doc_embedder import vocab_asset
from realm_tf.signatures.reusable import ReusableModule
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")
MLM_SPECS = {n: tf.TensorSpec([None, None], tf.int32, name=n)
             for n in _FEATURES + ("masked_lm_positions",)}
_STRING = lambda name: tf.TensorSpec([None], tf.string, name=name)


def span_specs(reader_length: int):
  """The "span" inputs: int32 [N, Lr] (the span head needs a static length)."""
  return {n: tf.TensorSpec([None, reader_length], tf.int32, name=n)
          for n in _FEATURES + ("block_mask",)}


def masked_query_ids(tokenizer: WordpieceTokenizer, queries: tf.Tensor) -> tf.RaggedTensor:
  """string [N] with literal "[MASK]" markers -> int32 [N, (T)] wordpieces, one `[MASK]` id
  per marker."""
  pieces = tf.strings.split(queries, sep="[MASK]")  # [N, (P)]
  ids = tokenizer(pieces.flat_values)  # [sum P, (T)]
  position = tf.range(tf.size(pieces.flat_values, out_type=tf.int64)) - tf.repeat(
      pieces.row_starts(), pieces.row_lengths())
  is_last = tf.equal(position, tf.repeat(pieces.row_lengths() - 1, pieces.row_lengths()))
  marker = tf.RaggedTensor.from_row_lengths(
      tf.fill([tf.reduce_sum(tf.cast(~is_last, tf.int64))], tf.constant(tokenizer.mask_id,
                                                                        tf.int32)),
      tf.cast(~is_last, tf.int64))  # [sum P, (0 or 1)]
  with_markers = tf.concat([tf.cast(ids, tf.int32), marker], axis=1)
  return pieces.with_flat_values(with_markers).merge_dims(1, 2)


class _ReaderModule(ReusableModule):

  def __init__(self, reader: Reader, tokenizer: WordpieceTokenizer, query_length: int,
               block_length: int, reader_length: int, staging_dir: str):
    super().__init__(reader.variables)
    self._layers = Untracked(reader=reader, featurizer=Featurizer(
        tokenizer, query_length, block_length, reader_length))
    self.vocab_file = vocab_asset(tokenizer, staging_dir)
    int64 = lambda value: tf.Variable(value, dtype=tf.int64, trainable=False)
    self.do_lower_case = tf.Variable(tokenizer.lower_case, trainable=False)
    self.query_length = int64(query_length)
    self.block_length = int64(block_length)
    self.reader_length = int64(reader_length)
    self.max_span_width = int64(reader.span_scorer.max_span_width)
    self._mask_id = tokenizer.mask_id

  def _span(self, features, training=False):
    logits, starts, ends = self._layers.reader.span_logits(
        {n: tf.cast(features[n], tf.int32) for n in _FEATURES}, features["block_mask"],
        training=training)
    return {"span_logits": tf.cast(logits, tf.float32), "span_starts": starts,
            "span_ends": ends}

  def _mlm(self, features, training=False):
    logits = self._layers.reader.mlm_logits(
        {n: tf.cast(features[n], tf.int32) for n in _FEATURES}, features["masked_lm_positions"],
        training=training)
    return {"mlm_logits": tf.cast(logits, tf.float32)}

  def _span_ids(self, input_word_ids, input_mask, input_type_ids, block_mask):
    return self._span(dict(input_word_ids=input_word_ids, input_mask=input_mask,
                           input_type_ids=input_type_ids, block_mask=block_mask))

  @graph_functions.function(input_signature=list(MLM_SPECS.values()))
  def mlm(self, input_word_ids, input_mask, input_type_ids, masked_lm_positions):
    return self._mlm(dict(input_word_ids=input_word_ids, input_mask=input_mask,
                          input_type_ids=input_type_ids,
                          masked_lm_positions=masked_lm_positions))

  @graph_functions.function(
      input_signature=[_STRING("questions"), _STRING("titles"), _STRING("texts")])
  def read_text(self, questions, titles, texts):
    _, query_ids = self._layers.featurizer.questions(questions)
    features = self._layers.featurizer.reader_inputs(query_ids, titles[:, None], texts[:, None])
    outputs = self.span(**features)
    outputs.update(features)
    return outputs

  @graph_functions.function(
      input_signature=[_STRING("queries"), _STRING("titles"), _STRING("texts")])
  def mlm_text(self, queries, titles, texts):
    query_ids = masked_query_ids(self._layers.featurizer.tokenizer, queries)
    query_ids = query_ids[:, :self._layers.featurizer.query_length - 2]
    features = self._layers.featurizer.reader_inputs(query_ids, titles[:, None], texts[:, None])
    is_mask = tf.logical_and(tf.equal(features["input_word_ids"], self._mask_id),
                             tf.equal(features["input_type_ids"], 0))
    positions = tf.ragged.boolean_mask(
        tf.broadcast_to(tf.range(tf.shape(is_mask)[1]), tf.shape(is_mask)), is_mask)
    weights = tf.ones_like(positions, tf.float32).to_tensor(0.0)
    features["masked_lm_positions"] = positions.to_tensor(0)
    outputs = self.mlm(**{n: features[n] for n in MLM_SPECS})
    outputs.update({n: features[n] for n in MLM_SPECS}, masked_lm_weights=weights)
    return outputs

  @graph_functions.function
  def __call__(self, inputs, training=False):
    if "masked_lm_positions" in inputs:
      return self._mlm(inputs, training)
    return self._span(inputs, training)


def export_reader(reader: Reader, tokenizer: WordpieceTokenizer, path: str,
                  query_length: int = 64, block_length: int = BLOCK_LENGTH,
                  reader_length: int = 320) -> str:
  """Writes `reader` (MLM and span heads) as a SavedModel at `path`; returns `path`."""
  with tempfile.TemporaryDirectory() as staging_dir:
    module = _ReaderModule(reader, tokenizer, query_length, block_length, reader_length,
                           staging_dir)
    specs = span_specs(reader_length)
    module.span = graph_functions.function(module._span_ids,  # pylint: disable=protected-access
                                           input_signature=list(specs.values()))
    module.save(path, [specs, dict(MLM_SPECS)], {
        name: getattr(module, name).get_concrete_function
        for name in ("span", "mlm", "read_text", "mlm_text")})
  return path
