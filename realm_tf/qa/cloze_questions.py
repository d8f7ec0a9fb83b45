"""Cloze questions from the salient-span pre-training examples: training questions for a new
reader's span head without labelled data (span-selection pre-training, Glass et al. 2020).

A reader whose encoder never learnt to extract answers (all-MiniLM-L6-v2, a sentence embedder)
starts fine-tuning with a fresh span head, and a small corpus's few hundred real questions are
too few to train it. Each pre-training example (a sentence, its salient span and label) gives
a question for free, the span replaced by a wh-word of its label (`WH_WORDS`, else "what"),
answered by the span's text:

    "abba were a who pop music group formed in stockholm , sweden in 1972"  ->  "Swedish"

They are `train_data` for `qa.finetune_lib` before the real questions, the reader reading one
answer-bearing block (`task.reader_top_k=1`, `task.read_answer_block`), mostly the example's
own source block. An example without a span (random-token masking) gives none.
"""
from typing import List

import numpy as np
import tensorflow as tf

from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

WH_WORDS = {"PERSON": "who", "NORP": "who", "DATE": "when", "TIME": "when", "GPE": "where",
            "LOC": "where", "FAC": "where"}
DEFAULT_WH_WORD = "what"


def wh_word(label: str) -> str:
  """The wh-word standing for a span of entity `label` ("PERSON" -> "who")."""
  return WH_WORDS.get(label, DEFAULT_WH_WORD)


def _joined(tokenizer: WordpieceTokenizer, rows: List[np.ndarray]) -> List[str]:
  """Wordpiece rows -> their text ("" for an empty row)."""
  ragged = tf.ragged.constant([row.tolist() for row in rows], dtype=tf.int64, ragged_rank=1)
  return [text.decode("utf-8") for text in tokenizer.detokenize(ragged).numpy()]


def cloze_questions(examples_dir: str, tokenizer: WordpieceTokenizer) -> List[QAExample]:
  """The cloze question of every salient-span example in `examples_dir`'s
  `examples-*.tfrecord` shards (verified as `data.shards` does), in shard order.

  Args:
    examples_dir: the salient-span pipeline's output.
    tokenizer: the vocabulary of the examples' wordpieces.

  Returns:
    QAExample("<sentence, span -> wh-word>", (span text,), source="<shard>:<record>") per
    example with a span and a span text.
  """
  lefts, rights, labels, answers, sources = [], [], [], [], []
  for path in shards.check_shards(examples_dir, "examples").files:
    for number, record in enumerate(tf.data.TFRecordDataset(path), start=1):
      example = formats.parse_pretraining_example(record)
      start, end = int(example["span_start"]), int(example["span_end"])
      answer = example["span_text"].numpy().decode("utf-8").strip()
      if end < start or not answer:
        continue
      ids = example["query_ids"].numpy()
      lefts.append(ids[:start])
      rights.append(ids[end + 1:])
      labels.append(example["span_label"].numpy().decode("utf-8"))
      answers.append(answer)
      sources.append(f"{path}:{number}")
  if not answers:
    return []
  questions = []
  for left, right, label, answer, source in zip(
      _joined(tokenizer, lefts), _joined(tokenizer, rights), labels, answers, sources):
    question = " ".join(part for part in (left, wh_word(label), right) if part)
    questions.append(QAExample(question.rstrip(" ."), (answer,), source=source))
  return questions
