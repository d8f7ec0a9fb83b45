"""Cloze questions from salient-span pre-training examples (`realm_tf.qa.cloze_questions`)."""
import os

import pytest
import tensorflow as tf

from realm_tf import tiny_world
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.qa import datasets
from realm_tf.qa.cloze_questions import cloze_questions
from realm_tf.qa.cloze_questions import wh_word


def _write_examples(directory, examples):
  tok = tiny_world.tokenizer()
  path = os.path.join(directory, "examples-00000-of-00001.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for sentence, span, label in examples:
      ids = tok(tf.constant([sentence])).to_list()[0]
      if span is None:  # a random-token example: no span
        writer.write(formats.pretraining_example(ids, 1, 0, 7, "", "RANDOM_TOKEN"))
        continue
      span_ids = tok(tf.constant([span])).to_list()[0]
      start = next(i for i in range(len(ids)) if ids[i:i + len(span_ids)] == span_ids)
      writer.write(formats.pretraining_example(ids, start, start + len(span_ids) - 1, 7,
                                               span.title(), label))
  return path


def test_the_span_becomes_the_wh_word_of_its_label(tmp_path):
  path = _write_examples(str(tmp_path), [
      ("ada lives in the city of doha .", "doha", "GPE"),
      ("the tailor is ada .", "ada", "PERSON"),
      ("ada lives in doha .", None, None),
      ("the chef is bob .", "the chef", "WORK_OF_ART")])
  questions = cloze_questions(str(tmp_path), tiny_world.tokenizer())
  assert [(q.question, q.answers) for q in questions] == [
      ("ada lives in the city of where", ("Doha",)),
      ("the tailor is who", ("Ada",)),
      ("what is bob", ("The Chef",))]
  # The source names the shard and the record (1-based); the random-token record is skipped.
  assert [q.source for q in questions] == [f"{path}:1", f"{path}:2", f"{path}:4"]


def test_the_questions_load_as_training_questions(tmp_path):
  tiny_world.write_pipeline(str(tmp_path / "world"))
  questions = cloze_questions(str(tmp_path / "world"), tiny_world.tokenizer())
  assert len(questions) == 2 * len(tiny_world.PEOPLE)  # two FACT spans per person
  assert questions[0].question == "ada lives in the city of what"
  datasets.write_jsonl(questions, str(tmp_path / "cloze.jsonl"))
  loaded = datasets.load_examples(str(tmp_path / "cloze.jsonl"))
  assert [(q.question, q.answers) for q in loaded] == [(q.question, q.answers)
                                                      for q in questions]


def test_wh_words():
  assert [wh_word(label) for label in ("PERSON", "NORP", "DATE", "LOC", "ORG", "")] == [
      "who", "who", "when", "where", "what", "what"]


def test_a_damaged_examples_directory_is_named(tmp_path):
  with pytest.raises(FileNotFoundError):
    cloze_questions(str(tmp_path / "missing"), tiny_world.tokenizer())
  (tmp_path / "examples-00000-of-00002.tfrecord").write_bytes(b"")
  with pytest.raises(shards.ShardError):
    cloze_questions(str(tmp_path), tiny_world.tokenizer())
