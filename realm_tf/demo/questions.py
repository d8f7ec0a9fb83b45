"""The demo's questions: NQ-open dev questions whose answer the indexed corpus holds.

`answerable` keeps a question when some block of the corpus holds one of its gold answers,
by `realm_tf.evaluation.has_answer` (DPR's token containment, the test recall@k applies), so
every kept question can be answered from the corpus in principle. `split` assigns each kept
question to train or dev by a hash of its text: deterministic, independent of the corpus and
of the order of the questions.
"""
import collections
import hashlib
import re
import unicodedata
from typing import Dict, List, Sequence, Set, Tuple

from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.evaluation.qa_example import QAExample

_RUN = re.compile(r"[^\W_]+")


def _runs(text: str) -> List[str]:
  """The letter/digit runs of the NFD-lowered text (marks and symbols split runs; final sigma
  folded, as `has_answer` lowers word by word)."""
  return _RUN.findall(unicodedata.normalize("NFD", text).lower().replace("\u03c2", "\u03c3"))


class AnswerFinder:
  """Finds the blocks holding an answer through an inverted index of letter/digit runs.

  A block holds an answer's tokens (`has_answer`) only if it holds every letter/digit run of
  the answer, so the index narrows the blocks down and `AnswerMatcher.has_answer` decides.

  Args:
    texts: the N block texts.
  """

  def __init__(self, texts: Sequence[str]):
    self.texts = texts
    self._rows: Dict[str, Set[int]] = collections.defaultdict(set)
    for row, text in enumerate(self.texts):
      for run in set(_runs(text)):
        self._rows[run].add(row)

  def _candidates(self, answer: str) -> Set[int]:
    runs = sorted(set(_runs(answer)), key=lambda run: len(self._rows.get(run, ())))
    if not runs:
      return set()
    rows = set(self._rows.get(runs[0], ()))
    for run in runs[1:]:
      rows &= self._rows.get(run, set())
    return rows

  def answer_rows(self, answer: str) -> List[int]:
    """The rows of the blocks holding the (string) `answer`, in order."""
    matcher = AnswerMatcher([answer])
    return [row for row in sorted(self._candidates(answer))
            if matcher.has_answer(self.texts[row])]

  def has_answer(self, example: QAExample) -> bool:
    """Whether some block holds one of the example's (string) answers."""
    matcher = AnswerMatcher(example.answers, example.match)
    candidates = set().union(*(self._candidates(a) for a in example.answers))
    return any(matcher.has_answer(self.texts[row]) for row in sorted(candidates))


def answerable(examples: Sequence[QAExample], texts: Sequence[str]) -> List[QAExample]:
  """The examples (string answers) some block text answers, in their order."""
  finder = AnswerFinder(texts)
  return [example for example in examples if finder.has_answer(example)]


def is_dev(question: str, dev_percent: int) -> bool:
  """Whether `question` falls in the dev split: sha256 of its text, mod 100, < dev_percent."""
  digest = hashlib.sha256(question.encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") % 100 < dev_percent


def split(examples: Sequence[QAExample],
          dev_percent: int) -> Tuple[List[QAExample], List[QAExample]]:
  """(train, dev) by `is_dev`, each in the examples' order."""
  if not 0 < dev_percent < 100:
    raise ValueError(f"dev_percent must be in 1..99, got {dev_percent}")
  train = [e for e in examples if not is_dev(e.question, dev_percent)]
  dev = [e for e in examples if is_dev(e.question, dev_percent)]
  return train, dev
