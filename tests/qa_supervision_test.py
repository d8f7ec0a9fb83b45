"""Has-answer and gold spans for fine-tuning agree with evaluation and with the span head."""
import numpy as np
import pytest
import tensorflow as tf

from realm_tf.evaluation import InvalidAnswerPattern
from realm_tf.evaluation import has_answer
from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.layers.span_scorer import span_candidates
from realm_tf.losses.open_qa_loss import correct_spans
from realm_tf.qa.supervision import find_spans
from realm_tf.qa.supervision import gold_spans
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "beatles", "were", "a", "band",
         "from", "liverpool", "who", "formed", "?", ".", "sandra", "day", "o", "'", "connor",
         "1960", "in", "rock", "english", "café", "cafe"]

TEXTS = [
    "The Beatles were an English rock band, formed in Liverpool in 1960.",
    "Sandra Day O'Connor served on the court.",
    "Café society; ΟΔΥΣΣΕΥΣ'Α and ΟΔΥΣΣΕΥΣ.",
    "İstanbul — $100 million, 50% off!",
    "",
]
ANSWERS = [["the beatles"], ["Beatles"], ["liver"], ["LIVERPOOL", "nope"], ["Sandra Day O'Connor"],
           ["oconnor"], ["cafe\u0301"], ["Café society"], ["οδυσσευς"], ["ΟΔΥΣΣΕΥΣ'α"],
           ["istanbul"], ["i̇stanbul"], ["$100"], ["50%"], ["!"], ["—"], [""], [" "], ["1960."]]


@pytest.mark.parametrize("answers", ANSWERS)
def test_has_answer_is_evaluations_has_answer(answers):
  matcher = AnswerMatcher(answers)
  for text in TEXTS:
    assert matcher.has_answer(text) == has_answer(text, answers, "string"), (text, answers)


def test_has_answer_regex():
  matcher = AnswerMatcher([r"19[0-9]{2}", r"liver\w+"], match="regex")
  assert matcher.has_answer(TEXTS[0]) and not matcher.has_answer(TEXTS[1])
  with pytest.raises(InvalidAnswerPattern, match="'\\(unclosed'"):
    AnswerMatcher(["(unclosed"], match="regex")
  with pytest.raises(ValueError, match="match must be"):
    AnswerMatcher(["x"], match="fuzzy")


def test_answer_strings():
  assert AnswerMatcher(["The Beatles", "beatles"]).answer_strings("anything") == [
      "The Beatles", "beatles"]
  regex = AnswerMatcher([r"19[0-9]{2}", r"(the )?beatles"], match="regex")
  assert regex.answer_strings(TEXTS[0]) == ["1960", "The Beatles", "beatles"]
  assert regex.answer_strings("no match here") == []


def test_find_spans():
  tokens = [5, 6, 7, 5, 6, 9, 6]
  assert find_spans(tokens, [[5, 6], [6]], max_span_width=10) == [
      (0, 1), (1, 1), (3, 4), (4, 4), (6, 6)]
  assert find_spans(tokens, [[5, 6, 7]], max_span_width=2) == []
  assert find_spans(tokens, [[], [8]], max_span_width=10) == []


def test_find_spans_whole_words_only():
  continuation = np.zeros(10, bool)
  continuation[8] = True  # id 8 is a "##" piece: 5 8 is one word, so is 6 8
  tokens = [5, 8, 6, 5, 6, 8, 6]
  assert find_spans(tokens, [[5], [6], [8]], max_span_width=10) == [
      (0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6)]
  assert find_spans(tokens, [[5], [6], [8]], 10, continuation) == [(2, 2), (3, 3), (6, 6)]
  assert find_spans(tokens, [[5, 8], [6, 8]], 10, continuation) == [(0, 1), (4, 5)]
  # The tokenizer's table marks exactly the "##" pieces.
  tokenizer = WordpieceTokenizer(VOCAB + ["##s"])
  assert np.flatnonzero(tokenizer.continuation).tolist() == [len(VOCAB)]


def _reader_inputs(reader_length):
  tokenizer = WordpieceTokenizer(VOCAB)
  featurizer = Featurizer(tokenizer, query_length=8, block_length=16,
                          reader_length=reader_length)
  _, query_ids = featurizer.questions(tf.constant(["who formed the beatles ?"]))
  titles = tf.constant([["the beatles", "x"]])
  texts = tf.constant([["the beatles were a band from liverpool . the beatles", "a band ."]])
  inputs = featurizer.reader_inputs(query_ids, titles, texts)
  answer_tokens = tokenizer(tf.constant(["The Beatles"])).to_list()
  return {n: t.numpy() for n, t in inputs.items()}, [answer_tokens, answer_tokens]


def test_gold_spans_are_span_head_candidates():
  inputs, answer_tokens = _reader_inputs(reader_length=20)
  starts, ends = gold_spans(inputs["input_word_ids"], inputs["block_mask"], answer_tokens,
                            max_span_width=3, max_spans=4)
  # [CLS] who formed the beatles ? [SEP] = positions 0-6; the body starts at 7:
  # the beatles were a band from liverpool . the beatles [SEP].
  assert starts.tolist() == [[7, 15, -1, -1], [-1, -1, -1, -1]]
  assert ends.tolist() == [[8, 16, -1, -1], [-1, -1, -1, -1]]
  candidate_starts, candidate_ends = span_candidates(20, 3)
  correct = correct_spans(candidate_starts, candidate_ends, starts[None], ends[None]).numpy()
  assert correct.sum() == 2
  found = np.flatnonzero(correct[0, 0])
  assert [(candidate_starts[i], candidate_ends[i]) for i in found] == [(7, 8), (15, 16)]
  # The question's own "the beatles" (positions 3-4) is never gold: it is not in the block.
  assert inputs["block_mask"][0, 3] == 0


def test_gold_spans_respect_reader_truncation():
  inputs, answer_tokens = _reader_inputs(reader_length=17)  # the body keeps 9 wordpieces
  starts, ends = gold_spans(inputs["input_word_ids"], inputs["block_mask"], answer_tokens,
                            max_span_width=3, max_spans=4)
  assert starts[0].tolist() == [7, -1, -1, -1] and ends[0].tolist() == [8, -1, -1, -1]


def test_gold_spans_padding_and_cap():
  ids = np.array([[2, 9, 3, 5, 5, 5, 3, 0]])
  mask = np.array([[0, 0, 0, 1, 1, 1, 0, 0]])
  starts, ends = gold_spans(ids, mask, [[[5]]], max_span_width=10, max_spans=2)
  assert starts.tolist() == [[3, 4]] and ends.tolist() == [[3, 4]]
  empty_starts, _ = gold_spans(ids, np.zeros_like(mask), [[[5]]], 10, 2)
  assert empty_starts.tolist() == [[-1, -1]]
