"""ORQA's answer string (`realm_tf.tokenization.answer_text` through `Featurizer.span_text`)
against an independent pure-Python ORQA: `get_predictions`' original tokens and token map, and
BERT's `get_final_text` with its own BasicTokenizer, on 12,000 random spans of real Wikipedia
lead extracts and of synthetic blocks (accents, numbers with punctuation, CJK, `[UNK]` words,
Unicode spaces and format characters). The reference is checked against Model Garden's own
`squad_lib.get_final_text` and tensorflow-text's split as ORQA calls it.
"""
import collections
import random
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from realm_tf import pretrained
from realm_tf.demo import wikipedia
from realm_tf.tokenization import Featurizer
from realm_tf.tokenization import WordpieceTokenizer
from realm_tf.tokenization import answer_text

BLOCK_LENGTH = 96  # the reader reads up to 96 - 3 - |title| body wordpieces
REAL_SPANS = 8000
SYNTHETIC_SPANS = 4000
MAX_WIDTH = 10

# ---------------------------------------------------------------------------------------------
# The reference: ORQA and BERT written out in Python from their definitions.


def _is_punctuation(char):
  cp = ord(char)
  return (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or
          unicodedata.category(char).startswith("P"))


def _is_cjk(char):
  cp = ord(char)
  return any(lo <= cp <= hi for lo, hi in (
      (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
      (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


def _is_control(char):
  return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf")


def _is_whitespace(char):
  return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def orqa_original_tokens(text):
  """ORQA's `tokenize_with_original_mapping` split: [(token, first char, end char)]."""
  tokens, begin = [], None
  for i, char in enumerate(text + " "):
    if unicodedata.category(char) in ("Cc", "Cf"):
      char = " "  # ORQA's regex_replace(\p{Cc}|\p{Cf}, " ")
    separate = _is_punctuation(char) or _is_cjk(char)
    if char in " \t\n\f\r" or separate:  # RE2's \s is ASCII only
      if begin is not None:
        tokens.append((text[begin:i], begin, i))
        begin = None
      if separate:
        tokens.append((char, i, i + 1))
    elif begin is None:
      begin = i
  return tokens


def basic_tokenize(text):
  """BERT's BasicTokenizer(do_lower_case=True).tokenize."""
  text = "".join(" " if _is_whitespace(c) else c for c in text
                 if not (ord(c) in (0, 0xFFFD) or _is_control(c)))
  text = "".join(f" {c} " if _is_cjk(c) else c for c in text)
  pieces = []
  for token in text.split():
    token = "".join(c for c in unicodedata.normalize("NFD", token.lower())
                    if unicodedata.category(c) != "Mn")
    word = ""
    for char in token:
      if _is_punctuation(char):
        pieces += [word, char]
        word = ""
      else:
        word += char
    pieces.append(word)
  return " ".join(" ".join(pieces).split()).split()


def get_final_text(pred_text, orig_text, outcomes=None):
  """BERT's get_final_text(do_lower_case=True): align pred_text into orig_text by characters.
  Counts in `outcomes` (a Counter) whether pred_text was "absent", "unaligned" or "aligned"."""
  outcome = lambda name: outcomes is not None and outcomes.update([name])
  tok_text = " ".join(basic_tokenize(orig_text))
  start = tok_text.find(pred_text)
  if start < 0:
    outcome("absent")
    return orig_text
  end = start + len(pred_text) - 1
  orig_chars = [i for i, c in enumerate(orig_text) if c != " "]
  tok_chars = {i: n for n, i in enumerate(i for i, c in enumerate(tok_text) if c != " ")}
  if len(orig_chars) != len(tok_chars) or start not in tok_chars or end not in tok_chars:
    outcome("unaligned")
    return orig_text
  outcome("aligned")
  return orig_text[orig_chars[tok_chars[start]]:orig_chars[tok_chars[end]] + 1]


def orqa_answer(vocabulary, span_ids, tokens, first_token, last_token, outcomes=None):
  """ORQA's get_predictions from the span's wordpieces and its original-token range."""
  pred_text = " ".join(vocabulary[i].strip() for i in span_ids)
  orig_text = " ".join(token for token, _, _ in tokens[first_token:last_token + 1])
  return get_final_text(pred_text, orig_text, outcomes)


# ---------------------------------------------------------------------------------------------
# Blocks and spans.

PLAIN = ["the", "river", "Torquinton", "cartilage", "unaffable", "museum", "was", "founded",
         "in", "by", "PARIS", "Museum", "of", "and", "Scientists", "playwright", "Ngata"]
ACCENTS = ["Café", "Zürich", "São", "naïve", "Dvořák", "Ångström", "Ærø", "Ελλάδα", "ΟΔΟΣ",
           "İstanbul", "Straße", "Cafe\u0301", "résumé", "Ñandú", "Łódź", "Øre", "ǅungla",
           "ﬁsh", "x²", "co\u00adoperate"]
NUMBERS = ["1,536", "3.14", "1990s", "10–20", "$5", "50%", "2nd", "1.5km", "(1923)", "B-52",
           "−40", "1/2", "#7"]
CJK = ["東京", "北京大学", "日本語", "漢字x", "中", "한국어", "ひらがな"]
UNKNOWN = ["🙂", "\u16a0\u16c7\u16bb", "☃", "ꙮꙮ", "x" * 120, "a\ufffdb"]
PUNCTUATION = ["O'Connor", "U.S.", "well-known", "«quoted»", "“smart”", "e.g.", "Smith's",
               "##", "[UNK]", "AT&T", "...", "—"]
SPACES = [" "] * 30 + ["  ", "\u00a0", "\u2009", "\n", "\t", " \u200b ", "\u2060", "\u3000",
                      "\u2028"]


def synthetic_blocks(rng, count):
  """Random words of every kind; every other block has only plain spaces between them."""
  pools = (PLAIN, PLAIN, ACCENTS, NUMBERS, CJK, UNKNOWN, PUNCTUATION)
  blocks = []
  for n in range(count):
    words = [rng.choice(rng.choice(pools)) for _ in range(rng.randint(5, 40))]
    text = words[0]
    for word in words[1:]:
      text += (rng.choice(SPACES) if n % 2 else " ") + word
    blocks.append(text)
  return blocks


@pytest.fixture(scope="module")
def tokenizer():
  return pretrained.minilm_tokenizer()


@pytest.fixture(scope="module")
def featurizer(tokenizer):
  return Featurizer(tokenizer, query_length=8, block_length=BLOCK_LENGTH,
                    reader_length=8 + BLOCK_LENGTH)


def _reader_inputs(featurizer, texts):
  """Reader inputs of the question "q" with each text (empty titles): int32 [B, Lr] each."""
  _, query_ids = featurizer.questions(tf.constant(["q"] * len(texts)))
  return featurizer.reader_inputs(query_ids, tf.constant([[""]] * len(texts)),
                                  tf.constant([[t] for t in texts]))


def _answers(featurizer, texts, starts, ends):
  inputs = _reader_inputs(featurizer, texts)
  return [a.decode() for a in featurizer.span_text(
      tf.constant(texts), inputs["input_word_ids"], inputs["block_mask"], starts, ends).numpy()]


def _ask(featurizer, text, spans):
  """Answers of spans given as (first, last) body wordpiece indices of one text."""
  body = 3  # [CLS] q [SEP]
  return _answers(featurizer, [text] * len(spans), [body + s for s, _ in spans],
                  [body + e for _, e in spans])


# ---------------------------------------------------------------------------------------------
# Unit cases.


def test_a_word_prefix_reads_the_prefix_in_the_original_case(featurizer):
  # tor ##quin ##ton ' s cart ##ila ##ge
  assert _ask(featurizer, "Torquinton's cartilage", [(0, 0), (5, 5), (0, 3)]) == [
      "Tor", "cart", "Torquinton '"]


def test_a_part_of_a_punctuated_number_reads_the_part(featurizer):
  # 1 , 53 ##6 and 3 . 14
  text = "1,536 and 3.14"
  assert _ask(featurizer, text, [(2, 2), (2, 3), (0, 0), (0, 2), (5, 7), (7, 7)]) == [
      "53", "536", "1", "1 , 53", "3 . 14", "14"]


def test_a_span_holding_a_continuation_piece_reads_the_whole_original_words(featurizer):
  text = "Torquinton's 1,536"
  assert _ask(featurizer, text, [(0, 1), (1, 1), (2, 2), (1, 4), (5, 8)]) == [
      "Torquinton", "Torquinton", "Torquinton", "Torquinton ' s", "1 , 536"]


def test_accents_case_cjk_and_unknown_words(featurizer, tokenizer):
  text = "Café ZÜRICH Torquinté Torquinte\u0301 東京 🙂 x O'Connor"
  pieces = [tokenizer.id_to_token(i) for i in tokenizer(tf.constant([text])).to_list()[0]]
  assert pieces == ["cafe", "zurich", "tor", "##quin", "##te", "tor", "##quin", "##te", "東",
                    "京", "[UNK]", "x", "o", "'", "connor"]
  assert _ask(featurizer, text, [(0, 0), (1, 1), (0, 1), (2, 2), (5, 5), (8, 8), (8, 9),
                                 (10, 10), (10, 11), (11, 11), (12, 14)]) == [
      "Café", "ZÜRICH", "Café ZÜRICH", "Tor",
      "Torquinte\u0301",  # a decomposed accent: the characters do not align, orig_text whole
      "東", "東 京", "🙂", "🙂 x", "x", "O ' Connor"]


def test_reader_wordpieces_not_of_the_text_are_detokenized(featurizer):
  inputs = _reader_inputs(featurizer, ["the river"])
  answer = featurizer.span_text(tf.constant(["a museum"]), inputs["input_word_ids"],
                                inputs["block_mask"], [3], [4])
  assert answer.numpy().tolist() == [b"the river"]


def test_empty_texts_and_batches(featurizer):
  assert answer_text.final_text(tf.constant(["a", ""]), tf.constant(["", ""])).numpy().tolist(
      ) == [b"", b""]
  inputs = _reader_inputs(featurizer, ["", ""])  # no body: [CLS] q [SEP] [SEP]
  assert featurizer.span_text(tf.constant(["", ""]), inputs["input_word_ids"],
                              inputs["block_mask"], [3, 4], [3, 2]).numpy().tolist() == [
                                  b"[SEP]", b""]
  assert featurizer.span_text(tf.constant([], tf.string), inputs["input_word_ids"][:0],
                              inputs["block_mask"][:0], [], []).numpy().tolist() == []


def test_works_in_a_saved_model(tmp_path):
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "q", "tor", "##quin", "1", ",", "536"]
  featurizer = Featurizer(WordpieceTokenizer(vocab), query_length=4, block_length=12,
                          reader_length=12)
  module = tf.Module()
  module.featurizer = featurizer

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)] * 2 +
                              [tf.TensorSpec([None], tf.int32)] * 2)
  def answer(questions, texts, starts, ends):
    _, query_ids = featurizer.questions(questions)
    inputs = featurizer.reader_inputs(query_ids, tf.fill([tf.size(texts), 1], ""),
                                      texts[:, None])
    return featurizer.span_text(texts, inputs["input_word_ids"], inputs["block_mask"], starts,
                                ends)

  module.answer = answer
  # [CLS] q [SEP] tor ##quin 1 , 536 [SEP]
  args = (tf.constant(["q", "q"]), tf.constant(["Torquin 1,536"] * 2), tf.constant([3, 3]),
          tf.constant([3, 7]))
  tf.saved_model.save(module, str(tmp_path))
  loaded = tf.saved_model.load(str(tmp_path))
  assert loaded.answer(*args).numpy().tolist() == [b"Tor", b"Torquin 1 , 536"]


# ---------------------------------------------------------------------------------------------
# The property: every random span reads the reference's string.


def test_reference_is_model_gardens_get_final_text():
  squad_lib = pytest.importorskip("official.nlp.data.squad_lib")
  rng = random.Random(1)
  for text in synthetic_blocks(rng, 300):
    tokens = orqa_original_tokens(text)
    for _ in range(5):
      a = rng.randrange(len(tokens))
      b = min(len(tokens) - 1, a + rng.randrange(4))
      orig_text = " ".join(t for t, _, _ in tokens[a:b + 1])
      for pred_text in (" ".join(basic_tokenize(orig_text))[:rng.randint(1, 12)],
                        " ".join(basic_tokenize(orig_text)[:2]), "##" + orig_text[-2:]):
        assert get_final_text(pred_text, orig_text) == squad_lib.get_final_text(
            pred_text, orig_text, do_lower_case=True), (pred_text, orig_text)


def _orqa_wordpieces(tokenizer, token_strings):
  """ORQA's wordpieces of its original tokens (`tokenize_with_original_mapping`): int [N, (w)]."""
  table = tf.lookup.StaticVocabularyTable(
      tf.lookup.KeyValueTensorInitializer(tokenizer.vocabulary,
                                          tf.range(tokenizer.vocab_size, dtype=tf.int64)), 1)
  normalized = tf.strings.regex_replace(
      tf_text.normalize_utf8(tf_text.case_fold_utf8(tf.constant(token_strings)), "NFD"),
      r"\p{Mn}", "")
  return tf_text.WordpieceTokenizer(table, token_out_type=tf.int64).tokenize(normalized)


def _orqa_split_as_orqa_calls_it(texts):
  """`bert_utils.tokenize_with_original_mapping`'s split, with tensorflow-text's own patterns."""
  # pylint: disable=g-import-not-at-top,protected-access
  from tensorflow_text.python.ops import bert_tokenizer
  replaced = tf.strings.regex_replace(tf.constant(texts), r"\p{Cc}|\p{Cf}", " ")
  return tf_text.regex_split(replaced, bert_tokenizer._DELIM_REGEX_PATTERN,
                             bert_tokenizer._KEEP_DELIM_NO_WHITESPACE_PATTERN).to_list()


def test_random_spans_read_orqas_string(featurizer, tokenizer):
  _, bodies = wikipedia.load_wiki_summaries()  # real leads: `make test` installs their package
  rng = random.Random(0)
  real = rng.sample(bodies, 1000)
  synthetic = synthetic_blocks(rng, 1000)
  texts = real + synthetic
  vocabulary = tokenizer.vocabulary
  inputs = _reader_inputs(featurizer, texts)
  body_lengths = inputs["block_mask"].numpy().sum(axis=1)
  ids, byte_starts, byte_ends = (t.to_list() for t in tokenizer.tokenize_with_offsets(
      tf.constant(texts)))
  tokens = [orqa_original_tokens(t) for t in texts]
  assert [[t.encode() for t, _, _ in row] for row in tokens] == _orqa_split_as_orqa_calls_it(
      texts)
  # ORQA's own token map where its wordpieces are the reader's (else None).
  flat = [t for row in tokens for t, _, _ in row]
  orqa_pieces = iter(_orqa_wordpieces(tokenizer, flat).to_list())
  token_maps = []
  for row, text_ids in zip(tokens, ids):
    pieces = [next(orqa_pieces) for _ in row]
    same = [i for p in pieces for i in p] == text_ids
    token_maps.append([n for n, p in enumerate(pieces) for _ in p] if same else None)

  rows, starts, ends, expected = [], [], [], []
  mapped, outcomes = collections.Counter(), collections.Counter()
  for kind, block, count in (("real", range(len(real)), REAL_SPANS),
                             ("synthetic", range(len(real), len(texts)), SYNTHETIC_SPANS)):
    for _ in range(count):
      b = rng.choice(block)
      first = rng.randrange(body_lengths[b])
      last = min(body_lengths[b] - 1, first + rng.randrange(MAX_WIDTH))
      if token_maps[b] is not None:  # ORQA's get_predictions
        mapped[kind] += 1
        first_token, last_token = token_maps[b][first], token_maps[b][last]
      else:  # the original tokens the span's characters overlap
        data = texts[b].encode()
        begin = len(data[:byte_starts[b][first]].decode())
        end = max(len(data[:byte_ends[b][last]].decode()),
                  len(data[:byte_starts[b][last]].decode()) + 1)  # "ᄒ" of "한" has no bytes
        held = [n for n, (_, s, e) in enumerate(tokens[b]) if s < end and e > begin]
        first_token, last_token = held[0], held[-1]
      rows.append(b)
      starts.append(3 + first)
      ends.append(3 + last)
      expected.append(orqa_answer(vocabulary, ids[b][first:last + 1], tokens[b], first_token,
                                  last_token, outcomes))

  got = [a.decode() for a in featurizer.span_text(
      tf.gather(tf.constant(texts), rows), tf.gather(inputs["input_word_ids"], rows),
      tf.gather(inputs["block_mask"], rows), starts, ends).numpy()]
  mismatches = [(texts[rows[i]], starts[i], ends[i], got[i], expected[i])
                for i in range(len(rows)) if got[i] != expected[i]]
  assert not mismatches, (len(mismatches), mismatches[:5])
  assert len(rows) == REAL_SPANS + SYNTHETIC_SPANS >= 10_000
  # Most spans are checked on ORQA's own token map (the rest hold Unicode spaces or format
  # characters that ORQA's original tokens keep and the fast tokenizer splits at or drops).
  assert mapped["real"] > 0.8 * REAL_SPANS and mapped["synthetic"] > 0.2 * SYNTHETIC_SPANS, mapped
  # Every outcome of get_final_text is common.
  assert min(outcomes["absent"], outcomes["unaligned"], outcomes["aligned"]) > 100, outcomes
  assert len(set(expected)) > 5000
