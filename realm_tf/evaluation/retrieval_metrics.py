"""Retrieval recall@k and exact-match rate for Open-QA evaluation.

Dimension legend: Q questions, K retrieved blocks per question (best first).
"""
from typing import Dict, Iterable, Sequence

import numpy as np

from realm_tf.evaluation.answer_normalization import exact_match
from realm_tf.evaluation.answer_normalization import regex_match


def _checked_has_answer(has_answer, k: int) -> np.ndarray:
  has_answer = np.asarray(has_answer, dtype=bool)
  if has_answer.ndim != 2:
    raise ValueError(f"has_answer must be [Q, K], got shape {has_answer.shape}")
  if not 1 <= k <= has_answer.shape[1]:
    raise ValueError(f"k={k} outside 1..K={has_answer.shape[1]} retrieved blocks")
  return has_answer


def recall_at_k(has_answer, k: int) -> float:
  """Fraction of questions with an answer-bearing block among their top k.

  Args:
    has_answer: bool array [Q, K], has_answer[q, i] for the i-th retrieved block of question q.
    k: cut-off, 1 <= k <= K.

  Returns:
    recall in [0, 1].

  Raises:
    ValueError: `has_answer` is not [Q, K] with Q >= 1, or k is outside 1..K.
  """
  has_answer = _checked_has_answer(has_answer, k)
  if has_answer.shape[0] == 0:
    raise ValueError("recall@k of zero questions is undefined")
  return float(np.any(has_answer[:, :k], axis=1).mean())


class RecallAtK:
  """Streaming recall@k for several cut-offs over batches of questions.

  Args:
    ks: the cut-offs, e.g. (1, 5, 20, 100).

  Example:
    >>> metric = RecallAtK((1, 5))
    >>> metric.update(has_answer_batch)  # bool [Q, K], K >= 5
    >>> metric.result()  # {1: 0.25, 5: 0.5}
  """

  def __init__(self, ks: Sequence[int]):
    if not ks or min(ks) < 1:
      raise ValueError(f"ks must be positive cut-offs, got {ks}")
    self.ks = tuple(sorted(set(int(k) for k in ks)))
    self.reset()

  def reset(self) -> None:
    self.num_questions = 0
    self._hits = {k: 0 for k in self.ks}

  def update(self, has_answer) -> None:
    """Adds a batch: bool array [Q, K] with K >= max(ks)."""
    has_answer = _checked_has_answer(has_answer, self.ks[-1])
    first_hit = np.where(has_answer.any(axis=1), has_answer.argmax(axis=1), has_answer.shape[1])
    for k in self.ks:
      self._hits[k] += int(np.sum(first_hit < k))
    self.num_questions += has_answer.shape[0]

  def result(self) -> Dict[int, float]:
    """{k: recall@k} over all questions added since `reset`."""
    if not self.num_questions:
      raise ValueError("recall@k of zero questions is undefined")
    return {k: self._hits[k] / self.num_questions for k in self.ks}


def exact_match_rate(predictions: Sequence[str], answers: Sequence[Iterable[str]],
                     match: str = "string") -> float:
  """Fraction of predictions that match a gold answer.

  Args:
    predictions: [Q] predicted answer strings.
    answers: [Q] gold answers per question (regexes for match="regex", CuratedTrec).
    match: "string" (`exact_match`) or "regex" (`regex_match`).

  Returns:
    the exact-match rate in [0, 1].

  Raises:
    ValueError: lengths differ, no predictions, or an unknown `match`.
    InvalidAnswerPattern: with match="regex", a pattern does not compile.
  """
  matchers = {"string": exact_match, "regex": regex_match}
  if match not in matchers:
    raise ValueError(f"match must be one of {sorted(matchers)}, got {match!r}")
  if len(predictions) != len(answers):
    raise ValueError(f"{len(predictions)} predictions for {len(answers)} answer lists")
  if not predictions:
    raise ValueError("exact match of zero predictions is undefined")
  matcher = matchers[match]
  return sum(matcher(p, a) for p, a in zip(predictions, answers)) / len(predictions)
