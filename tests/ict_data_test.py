"""ICT splits block text into sentences with the corpus pipelines' splitter."""
import pytest

from realm_tf.tokenization import sentence_splitter
from realm_tf.training import ict_data


@pytest.mark.parametrize("text,expected", [
    ("Dr. Smith moved to the U.S. in 1990. He taught there.",
     ["Dr. Smith moved to the U.S. in 1990.", "He taught there."]),
    ("J. R. R. Tolkien wrote The Hobbit. It appeared in 1937.",
     ["J. R. R. Tolkien wrote The Hobbit.", "It appeared in 1937."]),
    ("The St. Lawrence river, e.g. near Quebec, is wide! Ships use it. Is it deep?",
     ["The St. Lawrence river, e.g. near Quebec, is wide!", "Ships use it.", "Is it deep?"]),
    ("No terminator here", ["No terminator here"]),
    ("  ", []),
])
def test_abbreviations_and_initials_do_not_end_a_sentence(text, expected):
  assert ict_data.split_sentences(text) == expected


def test_ict_and_the_pipelines_split_the_same_way():
  text = "Mr. Brown met Prof. Green at 5 p.m. on Jan. 3. They spoke. A. Lincoln was there."
  spans = sentence_splitter.split_sentences(text)
  assert ict_data.split_sentences(text) == [text[a:b] for a, b in spans]
