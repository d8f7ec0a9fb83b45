"""BERT WordPiece tokenizer as a Keras layer over tensorflow-text's `FastBertTokenizer`.

Runs in eager mode, inside `tf.function` and inside `tf.data.Dataset.map` (keras-nlp 0.4 style).
Dimension legend: B batch, T wordpieces.

Input strings are first re-encoded as UTF-8 with invalid bytes replaced by U+FFFD, so malformed
text never fails a pipeline; a replaced byte becomes `[UNK]`. Text is then split on whitespace
and punctuation, lower-cased with accents stripped (`lower_case=True`, the uncased BERT
vocabularies), and each word is split into the longest matching wordpieces; a word with no
complete split is `[UNK]`. Literal "[CLS]"/"[MASK]" in the text are ordinary punctuation and
letters, never special ids.
"""
import types
from typing import List, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from realm_tf import errors
from realm_tf.keras import keras


@keras.utils.register_keras_serializable(package="realm_tf")
class WordpieceTokenizer(keras.layers.Layer):
  """Strings to int32 wordpiece ids (wordpieces of all words merged into one row).

  Args:
    vocabulary: the wordpiece vocabulary, id = position in the list; must contain
      "[PAD]", "[UNK]", "[CLS]", "[SEP]" and "[MASK]".
    lower_case: lower-case, NFD-decompose and strip accents before splitting (uncased BERT).
    **kwargs: Keras layer arguments.

  Example:
    >>> tokenizer = WordpieceTokenizer.from_vocab_file("vocab.txt")
    >>> tokenizer(tf.constant(["The cats sat."]))  # int32 RaggedTensor [B, (T)]
  """

  _SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

  def __init__(self, vocabulary: Sequence[str], lower_case: bool = True, **kwargs):
    kwargs.setdefault("trainable", False)
    kwargs.setdefault("dtype", "int32")
    super().__init__(**kwargs)
    # A tuple of strings and a read-only mapping, which Keras does not track: a tracked list
    # of 30,522 wordpieces is walked on every eager call of the layer (~90 ms a call).
    self._vocabulary = tuple(str(token) for token in vocabulary)
    self.lower_case = bool(lower_case)
    self._token_ids = types.MappingProxyType(
        {token: i for i, token in enumerate(self._vocabulary)})
    self._continuation = np.array([t.startswith("##") for t in self._vocabulary], bool)
    missing = [t for t in self._SPECIAL_TOKENS if t not in self._token_ids]
    if missing:
      raise ValueError(f"vocabulary lacks the special tokens {missing}")
    self._tokenizer = tf_text.FastBertTokenizer(
        vocab=list(self._vocabulary),
        token_out_type=tf.int32,
        unknown_token="[UNK]",
        lower_case_nfd_strip_accents=self.lower_case,
        support_detokenization=True)

  @classmethod
  def from_vocab_file(cls, path: str, lower_case: bool = True, **kwargs) -> "WordpieceTokenizer":
    """Builds the tokenizer from a BERT `vocab.txt` (one token a line, id = line number)."""
    fix = "Pass the path of a BERT vocab.txt (--vocab_file)"
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(errors.describe(path, "no such vocabulary file", fix))
    if tf.io.gfile.isdir(path):
      raise errors.InputError(errors.describe(path, "is a directory, not a vocabulary file", fix))
    with tf.io.gfile.GFile(path, "r") as f:
      vocabulary = [line.rstrip("\r\n") for line in f]
    while vocabulary and not vocabulary[-1]:
      vocabulary.pop()
    if not vocabulary:
      raise errors.InputError(errors.describe(path, "empty vocabulary",
                                              "Pass a BERT vocab.txt, one wordpiece a line"))
    try:
      return cls(vocabulary, lower_case=lower_case, **kwargs)
    except ValueError as e:
      raise errors.InputError(errors.describe(
          path, f"not a BERT vocabulary: {e}",
          "Pass a BERT vocab.txt, one wordpiece a line")) from e

  @property
  def vocabulary(self) -> List[str]:
    return list(self._vocabulary)

  @property
  def vocab_size(self) -> int:
    return len(self._vocabulary)

  @property
  def pad_id(self) -> int:
    return self._token_ids["[PAD]"]

  @property
  def unk_id(self) -> int:
    return self._token_ids["[UNK]"]

  @property
  def cls_id(self) -> int:
    return self._token_ids["[CLS]"]

  @property
  def sep_id(self) -> int:
    return self._token_ids["[SEP]"]

  @property
  def mask_id(self) -> int:
    return self._token_ids["[MASK]"]

  @property
  def continuation(self) -> np.ndarray:
    """bool [V]: True for the "##" wordpieces, which continue the word before them (a word
    starts at every other wordpiece: BERT's basic tokenizer makes each punctuation mark a word)."""
    return self._continuation

  def token_to_id(self, token: str) -> int:
    """Id of `token`; raises KeyError for a token outside the vocabulary."""
    return self._token_ids[token]

  def id_to_token(self, token_id: int) -> str:
    """Token of `token_id`; raises IndexError outside [0, vocab_size)."""
    if not 0 <= token_id < len(self._vocabulary):
      raise IndexError(f"id {token_id} outside the vocabulary of size {self.vocab_size}")
    return self._vocabulary[token_id]

  def _batched_utf8(self, strings):
    """Returns (strings [B] valid UTF-8, whether the input was a scalar)."""
    strings = tf.convert_to_tensor(strings, dtype=tf.string)
    scalar = strings.shape.rank == 0
    if scalar:
      strings = strings[tf.newaxis]
    elif strings.shape.rank != 1:
      raise ValueError(f"expected a scalar or [B] string tensor, got shape {strings.shape}")
    strings = tf.strings.unicode_transcode(
        strings, input_encoding="UTF-8", output_encoding="UTF-8", errors="replace",
        replacement_char=0xFFFD)
    return strings, scalar

  def call(self, strings):
    """Tokenizes text.

    Args:
      strings: string Tensor [B], or a scalar string.

    Returns:
      int32 RaggedTensor [B, (T)]; for a scalar input an int32 Tensor [T]. An empty string gives
      an empty row.
    """
    strings, scalar = self._batched_utf8(strings)
    ids = self._tokenizer.tokenize(strings)  # [B, (T)]
    return ids[0] if scalar else ids

  def tokenize_with_offsets(self, strings):
    """Tokenizes text and returns each wordpiece's byte span in its string.

    Offsets index the UTF-8 bytes of the input; they are exact for valid UTF-8 (an invalid
    byte is replaced by the 3-byte U+FFFD first, which shifts later offsets in that string).

    Args:
      strings: string Tensor [B], or a scalar string.

    Returns:
      (ids, starts, ends): int32 RaggedTensors [B, (T)] (Tensors [T] for a scalar input); the
      wordpiece `t` covers bytes [starts[t], ends[t]).
    """
    strings, scalar = self._batched_utf8(strings)
    ids, starts, ends = self._tokenizer.tokenize_with_offsets(strings)
    starts = tf.cast(starts, tf.int32)
    ends = tf.cast(ends, tf.int32)
    if scalar:
      return ids[0], starts[0], ends[0]
    return ids, starts, ends

  def detokenize(self, ids):
    """Joins wordpieces back into text: "##" pieces glue to the previous piece, words are
    separated by one space, punctuation is its own word ("the cats sat ."). Special ids are
    rendered as their tokens.

    Args:
      ids: int RaggedTensor or Tensor [B, (T)], or a Tensor [T].

    Returns:
      string Tensor [B], or a scalar string for an input of rank 1.
    """
    if not isinstance(ids, tf.RaggedTensor):
      ids = tf.convert_to_tensor(ids)
    unbatched = ids.shape.rank == 1
    if unbatched:
      ids = ids[tf.newaxis]
    text = self._tokenizer.detokenize(tf.cast(ids, tf.int32))
    return text[0] if unbatched else text

  def get_config(self):
    config = super().get_config()
    config.update({"vocabulary": self.vocabulary, "lower_case": self.lower_case})
    return config
