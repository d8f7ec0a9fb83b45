"""The benchmark questions: NQ-open dev questions the corpus answers, train/dev by hash.

A question is kept when some block holds one of its answers (`realm_tf.demo.questions.
answerable`, the `has_answer` test of recall@k), and goes to dev when the sha256 of its text
mod 100 is below `dev_percent` (`realm_tf.demo.questions.split`): deterministic and
independent of the corpus. The train half is left for fine-tuned rows; every figure is
measured on dev. Only NQ-open *dev* is read; the NQ, WebQuestions and CuratedTrec test sets
are never touched.
"""
import dataclasses
from typing import List, Sequence

from realm_tf.demo import questions as questions_lib
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.qa import datasets

NQ_DEV = "pyserini:nq-dev"


@dataclasses.dataclass(frozen=True)
class QuestionSplit:
  """Attributes: source (the question set read), dev_percent, total (questions read),
  train and dev (the answerable questions of each split, in file order)."""
  source: str
  dev_percent: int
  total: int
  train: List[QAExample]
  dev: List[QAExample]

  @property
  def answerable(self) -> int:
    return len(self.train) + len(self.dev)

  def counts(self) -> dict:
    return {"source": self.source, "questions": self.total, "answerable": self.answerable,
            "train": len(self.train), "dev": len(self.dev), "dev_percent": self.dev_percent}


def answerable_split(texts: Sequence[str], dev_percent: int = 50,
                     source: str = NQ_DEV) -> QuestionSplit:
  """The questions of `source` some block text answers, split train/dev.

  Args:
    texts: [N] block texts (bodies, what recall@k matches answers in).
    dev_percent: share of the kept questions held out for dev (by hash), 1..99.
    source: a question set `realm_tf.qa.datasets.load_examples` reads (not a test set).
  """
  examples = _load(source)
  train, dev = questions_lib.split(questions_lib.answerable(examples, texts), dev_percent)
  return QuestionSplit(source, dev_percent, len(examples), train, dev)


def answerable_questions(texts: Sequence[str], source: str) -> List[QAExample]:
  """All the questions of `source` some block of `texts` answers (in file order): extra
  training questions, such as `pyserini:trivia-dev`, that no dev split draws from."""
  return questions_lib.answerable(_load(source), texts)


def _load(source: str) -> List[QAExample]:
  if "test" in source.lower():
    raise ValueError(f"the benchmark reads dev questions only, not {source!r}")
  return datasets.load_examples(source)
