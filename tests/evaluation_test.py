"""Tests of realm_tf.evaluation: answer normalisation, matching and retrieval recall."""
import numpy as np
import pytest

from realm_tf.evaluation import InvalidAnswerPattern
from realm_tf.evaluation import RecallAtK
from realm_tf.evaluation import exact_match
from realm_tf.evaluation import exact_match_rate
from realm_tf.evaluation import has_answer
from realm_tf.evaluation import normalize_answer
from realm_tf.evaluation import recall_at_k
from realm_tf.evaluation import regex_match


@pytest.mark.parametrize("text, expected", [
    ("The  Beatles!", "beatles"),
    ("a Tale of Two Cities.", "tale of two cities"),
    ("  An apple, the pear  ", "apple pear"),
    ("theatre", "theatre"),
    ("Caf\u00e9", "cafe\u0301"),  # NFD: the accent is a separate combining mark
    ("", ""),
])
def test_normalize_answer(text, expected):
  assert normalize_answer(text) == expected


def test_exact_match():
  assert exact_match("the Beatles", ["Beatles", "Fab Four"])
  assert exact_match("Café", ["cafe\u0301"])
  assert not exact_match("Beatles band", ["Beatles"])
  assert not exact_match("anything", [])


def test_regex_match_at_start_case_insensitive():
  assert regex_match("Sir Isaac Newton", [r"(Sir )?Isaac Newton"])
  assert regex_match("NEWTON was right", [r"newton"])
  assert not regex_match("Isaac Newton", [r"Newton"])  # match, not search
  assert regex_match("1969", [r"19[0-9]{2}", r"nope"])


def test_invalid_regex_names_the_pattern():
  with pytest.raises(InvalidAnswerPattern, match=r"'\(unclosed'") as info:
    regex_match("x", ["x", "(unclosed"])
  assert isinstance(info.value, ValueError)
  assert info.value.pattern == "(unclosed"


def test_has_answer_string_is_token_level():
  block = "The Beatles were an English rock band, formed in Liverpool in 1960."
  assert has_answer(block, ["english rock"])
  assert has_answer(block, ["nope", "LIVERPOOL"])
  assert has_answer(block, ["1960"])
  assert not has_answer(block, ["Liver"])  # not a whole token
  assert not has_answer(block, ["rock english"])
  assert not has_answer(block, [""])
  assert has_answer("Café society", ["cafe\u0301"])


def test_has_answer_regex_searches_anywhere():
  block = "Newton was born in 1643."
  assert has_answer(block, [r"16[0-9]{2}"], match="regex")
  assert not has_answer(block, [r"^1643"], match="regex")
  with pytest.raises(InvalidAnswerPattern):
    has_answer(block, ["[bad"], match="regex")
  with pytest.raises(ValueError, match="match"):
    has_answer(block, ["x"], match="fuzzy")


HAS_ANSWER = np.array([
    [False, True, False],   # first hit at rank 2
    [True, False, False],   # rank 1
    [False, False, False],  # never
    [False, False, True],   # rank 3
])


@pytest.mark.parametrize("k, expected", [(1, 0.25), (2, 0.5), (3, 0.75)])
def test_recall_at_k(k, expected):
  assert recall_at_k(HAS_ANSWER, k) == expected


def test_recall_at_k_rejects_bad_k():
  with pytest.raises(ValueError):
    recall_at_k(HAS_ANSWER, 4)
  with pytest.raises(ValueError):
    recall_at_k(HAS_ANSWER, 0)


def test_streaming_recall_matches_full_matrix():
  metric = RecallAtK((3, 1, 2))
  metric.update(HAS_ANSWER[:3])
  metric.update(HAS_ANSWER[3:])
  assert metric.num_questions == 4
  assert metric.result() == {1: 0.25, 2: 0.5, 3: 0.75}
  metric.reset()
  with pytest.raises(ValueError):
    metric.result()


def test_exact_match_rate():
  predictions = ["The Beatles", "paris", "Newton"]
  assert exact_match_rate(predictions, [["beatles"], ["London"], ["newton"]]) == 2 / 3
  assert exact_match_rate(predictions, [["the beat"], ["Par"], ["x"]], match="regex") == 2 / 3
  with pytest.raises(ValueError):
    exact_match_rate(predictions, [["x"]])
