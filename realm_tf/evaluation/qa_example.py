"""`QAExample`: one Open-QA question with its gold answers, what every question set loads
(`realm_tf.qa.datasets`) and every recall or exact-match evaluation reads; `DATASETS`: the
benchmarks and how their answers are matched."""
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


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """A benchmark: its display name and how its answers are matched."""
  name: str
  match: str  # "string" or "regex"


DATASETS = {
    "nq": DatasetSpec("NaturalQuestions-Open", "string"),
    "wq": DatasetSpec("WebQuestions", "string"),
    "trivia": DatasetSpec("TriviaQA", "string"),
    "squad": DatasetSpec("SQuAD", "string"),
    "curatedtrec": DatasetSpec("CuratedTrec", "regex"),
}


def dataset_spec(dataset: str) -> DatasetSpec:
  """The `DatasetSpec` of a `DATASETS` key ("nq", "trivia", ...)."""
  if dataset not in DATASETS:
    raise ValueError(f"unknown dataset {dataset!r}; expected one of {sorted(DATASETS)}")
  return DATASETS[dataset]
