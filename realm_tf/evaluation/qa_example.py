"""`QAExample`: one Open-QA question with its gold answers, what every question set loads
(`realm_tf.qa.datasets`) and every recall or exact-match evaluation reads."""
import dataclasses
from typing import Tuple


@dataclasses.dataclass(frozen=True)
class QAExample:
  """One question with its gold answers.

  Attributes:
    question: the question text (non-empty).
    answers: gold answers, or gold regular expressions when `match == "regex"`.
    match: "string" (exact match after normalisation) or "regex" (CuratedTrec).
    source: "file:line" the example was read from.
  """
  question: str
  answers: Tuple[str, ...]
  match: str = "string"
  source: str = ""
