"""ORQA's answer string for a predicted span, in TF string ops.

Dimension legend: B spans (one per row), N original tokens of a text, n and m characters.

As ORQA's `get_predictions` with BERT's `get_final_text` (do_lower_case=True): `pred_text` is
the span's wordpieces joined by spaces ("##" kept); `orig_text` the block text's original
tokens holding them (BERT's basic split in the original case: at ASCII whitespace, control and
format characters, and around each punctuation mark and CJK character), joined by spaces. Where
pred_text occurs in orig_text's basic tokenization with as many characters, the characters are
aligned and that part of orig_text is the answer ("cart" of "cartilage" reads "cart"); else
orig_text whole ("tor ##quin" of "Torquinton"). A wordpiece belongs to the original tokens its
bytes overlap (the fast tokenizer also splits at non-ASCII spaces). It is TF ops, not a
`py_function`, because the exported `realm_qa` SavedModel computes it (docs/decisions.md).
"""
from typing import Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

# BERT's `_is_punctuation`: ASCII non-alphanumerics and Unicode category P*.
PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
# BERT's `_is_chinese_char` (the CJK Unified Ideographs blocks).
CJK = (r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
       r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")
_DELIMITERS = r"[\s\p{Cc}\p{Cf}]+|" + PUNCTUATION + "|" + CJK
_KEPT_DELIMITERS = PUNCTUATION + "|" + CJK
_SPACE = 32


def valid_utf8(texts: tf.Tensor) -> tf.Tensor:
  """string [B] -> [B] with each invalid byte replaced by U+FFFD, as `WordpieceTokenizer`
  reads text (so byte offsets of both agree)."""
  return tf.strings.unicode_transcode(texts, input_encoding="UTF-8", output_encoding="UTF-8",
                                      errors="replace", replacement_char=0xFFFD)


def original_tokens(texts: tf.Tensor) -> Tuple[tf.RaggedTensor, tf.RaggedTensor,
                                               tf.RaggedTensor]:
  """ORQA's original tokens of valid UTF-8 texts.

  Args:
    texts: string [B].

  Returns:
    (tokens string [B, (N)], begins int64 [B, (N)], ends int64 [B, (N)]): token t of row b is
    bytes [begins, ends) of texts[b].
  """
  return tf_text.regex_split_with_offsets(texts, _DELIMITERS, _KEPT_DELIMITERS)


def original_text(texts: tf.Tensor) -> tf.Tensor:
  """string [B] -> [B]: each text's original tokens joined by single spaces ("O'Connor." ->
  "O ' Connor ."); every answer `span_answer_text` gives for a text is a substring of it."""
  return tf.strings.reduce_join(original_tokens(valid_utf8(texts))[0], axis=1, separator=" ")


def basic_tokenized(texts: tf.Tensor) -> tf.Tensor:
  """BERT's `BasicTokenizer(do_lower_case=True)` tokens of each text joined by single spaces.

  Args:
    texts: string [B], valid UTF-8.

  Returns:
    string [B].
  """
  # `_clean_text`: whitespace (and the line/paragraph separators `str.split` splits at) to a
  # space, then drop NUL, U+FFFD and the other control and format characters.
  t = tf.strings.regex_replace(texts, r"[\t\n\r\p{Zs}\x{2028}\x{2029}]", " ")
  t = tf.strings.regex_replace(t, r"[\p{Cc}\p{Cf}\x{FFFD}]", "")
  t = tf.strings.regex_replace(t, "(" + CJK + ")", r" \1 ")
  # `str.lower` is the full Unicode lower-casing (final sigma, "İ" -> "i̇"), which ICU's
  # `toLower` behind `tf.strings.lower(encoding="utf-8")` also does; then accents stripped.
  t = tf.strings.lower(t, encoding="utf-8")
  t = tf_text.normalize_utf8(t, "NFD")
  t = tf.strings.regex_replace(t, r"\p{Mn}", "")
  t = tf.strings.regex_replace(t, "(" + PUNCTUATION + ")", r" \1 ")
  t = tf.strings.regex_replace(t, " +", " ")
  return tf.strings.regex_replace(t, "^ | $", "")


def _find(haystack: tf.Tensor, needle: tf.Tensor, needle_lengths: tf.Tensor) -> tf.Tensor:
  """First position of each needle in its haystack (`str.find` on code points).

  Args:
    haystack: int32 [B, n] code points, padded with -1.
    needle: int32 [B, m] code points, padded with anything.
    needle_lengths: int [B].

  Returns:
    int32 [B]: the position, -1 where absent.
  """
  haystack = tf.pad(haystack, [[0, 0], [0, 1]], constant_values=-1)  # n >= 1 for argmax
  n = tf.shape(haystack)[1]
  m = tf.shape(needle)[1]
  needle_lengths = tf.cast(needle_lengths, tf.int32)
  padded = tf.pad(haystack, [[0, 0], [0, m]], constant_values=-1)  # [B, n + m]
  lengths = tf.reduce_sum(tf.cast(haystack >= 0, tf.int32), axis=1)
  fits = tf.range(n)[None] + needle_lengths[:, None] <= lengths[:, None]  # [B, n]

  def body(j, match):  # One needle character against every window at once.
    same = tf.equal(padded[:, j:j + n], needle[:, j:j + 1])
    return j + 1, match & (same | (j >= needle_lengths)[:, None])

  _, match = tf.while_loop(lambda j, _: j < m, body, (tf.constant(0), fits))
  first = tf.argmax(tf.cast(match, tf.int32), axis=1, output_type=tf.int32)
  return tf.where(tf.reduce_any(match, axis=1), first, -1)


def final_text(pred_text: tf.Tensor, orig_text: tf.Tensor) -> tf.Tensor:
  """BERT's `get_final_text(pred_text, orig_text, do_lower_case=True)`, row by row.

  Args:
    pred_text: string [B], the span's wordpieces joined by spaces.
    orig_text: string [B], valid UTF-8, the original tokens holding them joined by spaces.

  Returns:
    string [B]: the part of orig_text that pred_text aligns to, else orig_text.
  """
  decode = lambda t: tf.strings.unicode_decode(t, "UTF-8").to_tensor(-1)
  tok = decode(basic_tokenized(orig_text))  # [B, n] code points, -1 padded
  orig = decode(orig_text)  # [B, n']
  pred = tf.strings.unicode_decode(pred_text, "UTF-8", errors="ignore")  # [B, (m)]
  pred_lengths = tf.cast(pred.row_lengths(), tf.int32)
  start = _find(tok, pred.to_tensor(-2), pred_lengths)
  end = start + pred_lengths - 1
  # Characters align by their index once spaces are dropped (`_strip_spaces`).
  tok_chars = tf.cast((tok >= 0) & (tok != _SPACE), tf.int32)
  orig_chars = tf.cast((orig >= 0) & (orig != _SPACE), tf.int32)
  ns_before = tf.cumsum(tok_chars, axis=1, exclusive=True)  # [B, n]
  orig_count = tf.cumsum(orig_chars, axis=1)  # [B, n']

  def at(values, i):  # values[b, i[b]], i clipped to the row; 0 past its end.
    values = tf.pad(values, [[0, 0], [0, 1]])
    return tf.gather(values, tf.clip_by_value(i, 0, tf.shape(values)[1] - 1), batch_dims=1)

  def orig_position(ns_index):  # where orig's spaceless character ns_index is
    return tf.reduce_sum(tf.cast(orig_count <= ns_index[:, None], tf.int32), axis=1)

  ok = ((start >= 0) & (pred_lengths > 0) &
        tf.equal(tf.reduce_sum(tok_chars, axis=1), tf.reduce_sum(orig_chars, axis=1)) &
        tf.equal(at(tok_chars, start), 1) & tf.equal(at(tok_chars, end), 1))
  orig_start = tf.where(ok, orig_position(at(ns_before, start)), 0)
  orig_end = tf.where(ok, orig_position(at(ns_before, end)), -1)
  cut = tf.strings.substr(orig_text, orig_start, orig_end - orig_start + 1, unit="UTF8_CHAR")
  return tf.where(ok, cut, orig_text)


def wordpiece_strings(vocabulary: Sequence[str]) -> np.ndarray:
  """The vocabulary as ORQA reads it for `pred_text`: object [V] of stripped lines."""
  return np.array([token.strip() for token in vocabulary], dtype=object)


def join(strings: tf.Tensor, keep: tf.Tensor) -> tf.Tensor:
  """string [B, W], bool [B, W] -> [B]: the kept strings of each row joined by single spaces
  (dense ops: a ragged `reduce_join` traces into thousands of graph ops)."""
  joined = tf.strings.reduce_join(tf.where(keep, strings + " ", ""), axis=1)
  length = tf.maximum(tf.strings.length(joined) - 1, 0)
  return tf.strings.substr(joined, tf.zeros_like(length), length)


def span_answer_text(texts: tf.Tensor, pred_text: tf.Tensor, byte_begin: tf.Tensor,
                     byte_end: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """ORQA's answer string of one span per text.

  Args:
    texts: string [B] block texts, valid UTF-8 (`valid_utf8`).
    pred_text: string [B] the span's wordpieces (`wordpiece_strings`) joined by spaces.
    byte_begin, byte_end: int [B] the bytes [begin, end) of texts that the span's wordpieces
      cover (the first one's start, the last one's end).

  Returns:
    (answers string [B], found bool [B]: False where no original token overlaps the bytes,
    whose answer is then empty).
  """
  tokens, begins, ends = original_tokens(texts)
  never = tf.int64.max  # padding that no comparison below counts
  begins, ends = begins.to_tensor(never), ends.to_tensor(never)  # [B, N]
  # The original tokens the bytes overlap: from the first ending after the span's first byte
  # to the last starting before its end (each wordpiece lies in one token where the two
  # tokenizations agree, as in ORQA's token map).
  first = tf.reduce_sum(tf.cast(ends <= tf.cast(byte_begin, tf.int64)[:, None], tf.int32), 1)
  last = tf.reduce_sum(tf.cast(begins < tf.cast(byte_end, tf.int64)[:, None], tf.int32), 1) - 1
  found = first <= last
  position = tf.range(tf.shape(begins)[1])[None]  # [1, N]
  orig_text = join(tokens.to_tensor(""), (position >= first[:, None]) & (position <= last[:, None]))
  return tf.where(found, final_text(pred_text, orig_text), ""), found
