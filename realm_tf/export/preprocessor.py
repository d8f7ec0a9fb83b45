"""The text preprocessor export: text -> the encoder exports' inputs, as TF Hub's BERT
preprocessors (built on tensorflow-text; loading it needs `import tensorflow_text`).

B texts, T wordpieces, L packed length (default Lq, the query length):
  `tokenize`:         string [B] -> int32 RaggedTensor [B, (T)], no special tokens
  `bert_pack_inputs`: one or two [B, (T)], optional `seq_length` -> {"input_word_ids",
                      "input_mask", "input_type_ids": int32 [B, L]}
  `__call__`, "serving_default": string [B] -> `bert_pack_inputs([tokenize(texts)])` at Lq
Packing truncates as the model does (waterfall: the first segment kept whole first), so the
exports see the wordpieces training saw. It has no weights. docs/exports.md has the details.
"""
import tempfile

import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.signatures.doc_embedder import Untracked
from realm_tf.signatures.doc_embedder import vocab_asset
from realm_tf.signatures.reusable import ReusableModule
from realm_tf.tokenization.bert_packer import pack_segments
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

TEXTS_SPEC = tf.TensorSpec([None], tf.string, name="texts")
_SEGMENT_SPEC = tf.RaggedTensorSpec([None, None], tf.int32)
_SEQ_LENGTH_SPEC = tf.TensorSpec([], tf.int32, name="seq_length")


class _PreprocessorModule(ReusableModule):

  def __init__(self, tokenizer: WordpieceTokenizer, seq_length: int, staging_dir: str):
    super().__init__([])
    self._tokenizer = Untracked(layer=tokenizer)
    self.vocab_file = vocab_asset(tokenizer, staging_dir)
    self.do_lower_case = tf.Variable(tokenizer.lower_case, trainable=False)
    self.seq_length = tf.Variable(seq_length, dtype=tf.int64, trainable=False)

    @graph_functions.function(input_signature=[TEXTS_SPEC])
    def tokenize(texts):
      return self._tokenizer.layer(texts)

    @graph_functions.function
    def bert_pack_inputs(segments, seq_length=seq_length):
      return pack_segments(list(segments), seq_length, tokenizer.cls_id, tokenizer.sep_id,
                           tokenizer.pad_id, truncation="waterfall")

    for num_segments in (1, 2):
      for length in (seq_length, _SEQ_LENGTH_SPEC):
        bert_pack_inputs.get_concrete_function([_SEGMENT_SPEC] * num_segments, length)
    self.tokenize, self.bert_pack_inputs = tokenize, bert_pack_inputs

  @graph_functions.function(input_signature=[TEXTS_SPEC])
  def __call__(self, texts):
    return self.bert_pack_inputs([self.tokenize(texts)])


def export_preprocessor(tokenizer: WordpieceTokenizer, path: str, seq_length: int = 64) -> str:
  """Writes the text preprocessor of `tokenizer` (default packed length `seq_length`, the query
  length) as a SavedModel at `path`; returns `path`."""
  with tempfile.TemporaryDirectory() as staging_dir:
    module = _PreprocessorModule(tokenizer, seq_length, staging_dir)
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
  return path
