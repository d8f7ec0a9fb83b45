"""`AnswerMatcher`: the gold answers of one question, matched against block texts.

* `has_answer(text)`: exactly `realm_tf.evaluation.has_answer` (the function recall@k uses),
  behind a cheap substring pre-check that can only say "no" when `has_answer` would, so the
  retriever loss over thousands of blocks per question stays cheap.
* `answer_strings(text)`: the strings whose wordpieces mark a correct span in a block: each
  gold answer and its `normalize_answer` form ("The Beatles" also matches a bare "beatles");
  for regex answers (CuratedTrec) every non-empty match of a pattern in the block.
"""
import re
import unicodedata
from typing import List, Sequence, Set

from realm_tf.evaluation.answer_normalization import InvalidAnswerPattern
from realm_tf.evaluation.answer_normalization import has_answer
from realm_tf.evaluation.answer_normalization import normalize_answer

_REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE
_WORD_RUN = re.compile(r"[^\W_]+|_", re.UNICODE)


def _fold(text: str) -> str:
  """NFD + lower, with the context-dependent final sigma folded, for substring pre-checks."""
  return unicodedata.normalize("NFD", text).lower().replace("\u03c2", "\u03c3")


class AnswerMatcher:
  """The gold answers of one question, matched against block texts.

  Args:
    answers: gold answers, or regular expressions when `match == "regex"`.
    match: "string" or "regex".

  Raises:
    InvalidAnswerPattern: a regex does not compile.
  """

  def __init__(self, answers: Sequence[str], match: str = "string"):
    if match not in ("string", "regex"):
      raise ValueError(f"match must be 'string' or 'regex', got {match!r}")
    self.answers = tuple(answers)
    self.match = match
    if match == "regex":
      self._patterns = []
      for pattern in self.answers:
        try:
          self._patterns.append(re.compile(unicodedata.normalize("NFD", pattern), _REGEX_FLAGS))
        except re.error as e:
          raise InvalidAnswerPattern(pattern, e) from e
      self._probes = ()
    else:
      # A block can only contain an answer's tokens if it contains the answer's first
      # alphanumeric run (has_answer's tokens are NFD-lowered letter/digit/mark runs).
      probes = []
      for answer in self.answers:
        runs = _WORD_RUN.findall(_fold(answer))
        probes.append(runs[0] if runs else _fold(answer).strip()[:1])
      self._probes = tuple(probes)

  def has_answer(self, text: str) -> bool:
    """`realm_tf.evaluation.has_answer(text, answers, match)`."""
    if self.match == "string":
      folded = None
      for probe in self._probes:
        if probe:
          folded = _fold(text) if folded is None else folded
          if probe in folded:
            return has_answer(text, self.answers, "string")
      return False
    return has_answer(text, self.answers, "regex")

  def answer_strings(self, text: str) -> List[str]:
    """Strings whose wordpieces mark a correct span in the block `text` (deduplicated)."""
    if self.match == "regex":
      normalized = unicodedata.normalize("NFD", text)
      found = [m.group(0) for pattern in self._patterns for m in pattern.finditer(normalized)]
      strings = [s for s in found if s.strip()]
    else:
      strings = list(self.answers)
    strings += [normalize_answer(s) for s in strings]
    seen: Set[str] = set()
    return [s for s in strings if s.strip() and not (s in seen or seen.add(s))]
