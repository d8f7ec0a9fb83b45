"""The `ask` front door: answers with their probability and evidence, from Python or a shell.

    from realm_tf.qa import ask
    answer = ask("who wrote Hamlet?", model_dir="/tmp/realm_qa/model")
    answer.answer, answer.probability, answer.evidence[0].title

`model_dir` is a fine-tuned model directory (its `best/` is used when present); without it,
`$REALM_TF_QA_MODEL`. `corpus=` swaps in another knowledge corpus (a `blocks-*.tfrecord`
directory, a JSONL or a DPR TSV file): it is embedded with the model's own doc embedder and
indexed, and the fine-tuned query tower and reader read it without retraining (REALM
Appendix C). `embeddings_dir=` reuses precomputed embeddings of that corpus after checking
them against the doc embedder. Loaded models are cached per configuration.
"""
import os
from typing import Callable, Dict, Iterable, List, Sequence, Tuple

from realm_tf import errors
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_builder import Sharding
from realm_tf.qa import datasets
from realm_tf.qa import released_imports
from realm_tf.qa.released_imports import ReleasedSettings
from realm_tf.qa.model import QAModel
from realm_tf.qa.model import find_model_dir
from realm_tf.retrieve_and_read import Answer

MODEL_ENV = "REALM_TF_QA_MODEL"
QUIT = ("quit", "exit", ":q")


class Asker:
  """A loaded QA model answering questions.

  Args:
    model_dir: a fine-tuned model directory (or its `best/`), or a released ORQA model
      directory (imported on first use, one index per setting: `qa.released_imports`).
    corpus: optional other knowledge corpus.
    embeddings_dir: optional precomputed embeddings of `corpus`.
    k: evidence blocks read per question.
    index_kind: with `corpus`, "scann" or "brute_force" (default: the model's); the index of
      a released model's import (default "scann").
    scann: with `corpus` or a released model, the ScaNN settings of a "scann" index.
    sharding: with `corpus` or a released model, the shard size of the index.
    embedding_dtype: with `corpus`, the precision it is embedded in ("float32", "bfloat16",
      "auto"; `QAModel.load`).
    released: how a released model directory is imported (`ReleasedSettings`).
    compute_dtype: the precision the query tower and the reader answer in ("float32",
      "bfloat16", "auto"; `QAModel.load`).
  """

  def __init__(self, model_dir: str, corpus: str = "", embeddings_dir: str = "", k: int = 5,
               index_kind: str = "", scann: ScannSettings = ScannSettings(),
               sharding: Sharding = Sharding(), embedding_dtype: str = "float32",
               released: ReleasedSettings = ReleasedSettings(), compute_dtype: str = "float32"):
    model_dir, doc_index = released_imports.model_directory(model_dir, index_kind, scann,
                                                            sharding, released)
    self.model = QAModel.load(find_model_dir(model_dir), corpus=corpus,
                              embeddings_dir=embeddings_dir, index_kind=index_kind,
                              scann=scann, sharding=sharding, embedding_dtype=embedding_dtype,
                              doc_index=doc_index, compute_dtype=compute_dtype)
    self.system = self.model.system(k=k)

  def ask(self, question: str) -> Answer:
    """Answers one question (normalised: `datasets.normalize_question`).

    Raises:
      errors.InputError: the question is empty or longer than `datasets.MAX_QUESTION_CHARS`.
    """
    return self.ask_many([question])[0]

  def ask_many(self, questions: Sequence[str]) -> List[Answer]:
    """Answers questions in batches (each checked as in `ask`)."""
    return self.system.answer([datasets.check_question(q, i)
                               for i, q in enumerate(questions, start=1)])


_ASKERS: Dict[Tuple, Asker] = {}


def _model_dir(model_dir: str) -> str:
  model_dir = model_dir or os.environ.get(MODEL_ENV, "")
  if not model_dir:
    raise errors.InputError(f"no model: pass --model_dir (model_dir=) or set ${MODEL_ENV} to a "
                            "fine-tuned model directory")
  return model_dir


def get_asker(model_dir: str = "", corpus: str = "", embeddings_dir: str = "", k: int = 5,
              index_kind: str = "", scann: ScannSettings = ScannSettings(),
              sharding: Sharding = Sharding(), embedding_dtype: str = "float32",
              released: ReleasedSettings = ReleasedSettings(),
              compute_dtype: str = "float32") -> Asker:
  """The cached `Asker` of a configuration (loaded on first use)."""
  key = (os.path.abspath(_model_dir(model_dir)), corpus, embeddings_dir, k, index_kind, scann,
         sharding, embedding_dtype, released, compute_dtype)
  if key not in _ASKERS:
    _ASKERS[key] = Asker(*key)
  return _ASKERS[key]


def ask(question: str, model_dir: str = "", corpus: str = "", embeddings_dir: str = "",
        k: int = 5) -> Answer:
  """Answers `question`: the answer text, its probability and the evidence blocks.

  Args:
    question: the question.
    model_dir: a fine-tuned model directory; default `$REALM_TF_QA_MODEL`.
    corpus: optional other knowledge corpus, embedded with the model's doc embedder.
    embeddings_dir: optional precomputed (verified) embeddings of `corpus`.
    k: evidence blocks read.

  Raises:
    errors.InputError: an empty or too long question (`Asker.ask`).
    ValueError: no model directory.
    EmbeddingMismatchError: `embeddings_dir` was not made by the model's doc embedder.
  """
  return get_asker(model_dir, corpus, embeddings_dir, k).ask(question)


def format_answer(answer: Answer, text_chars: int = 160) -> str:
  """A human-readable answer with its evidence."""
  lines = [f"Q: {answer.question}",
           f"A: {answer.answer!r}  (p={answer.probability:.3f})" if answer.answer else
           "A: (no answer span found)"]
  for i, evidence in enumerate(answer.evidence):
    marker = "*" if i == answer.block else " "
    text = evidence.text if len(evidence.text) <= text_chars else (
        evidence.text[:text_chars] + "...")
    lines.append(f" {marker}[{evidence.probability:.2f}] #{evidence.block_id} "
                 f"{evidence.title}: {text}")
  return "\n".join(lines)


def command_line_questions(flag_questions: Sequence[str], arguments: Sequence[str]
                           ) -> List[str]:
  """`realm-ask`'s questions: each `--question`, then each positional argument, one question
  apiece (`realm-ask "who wrote hamlet?" "where is elsinore?"` asks two; unquoted,
  `realm-ask who wrote hamlet` asks three one-word questions)."""
  return list(flag_questions) + list(arguments)


def answer_or_interact(asker: Asker, questions: Sequence[str], lines: Iterable[str],
                       write: Callable[[str], None]) -> None:
  """What `realm-ask` does: answers `questions`, or without any, reads them from `lines`.

  Raises:
    errors.InputError: an empty or too long question among `questions`.
  """
  if not questions:
    interactive(asker, lines, write)
  for question in questions:
    write(format_answer(asker.ask(question)) + "\n")


def interactive(asker: Asker, lines: Iterable[str], write: Callable[[str], None],
                prompt: str = "question> ") -> int:
  """Answers questions read from `lines` until EOF or "quit"; returns how many it answered.

  Empty lines are skipped; errors (a question too long) are reported and the loop goes on.
  """
  answered = 0
  write(prompt)
  for line in lines:
    question = line.strip()
    if question.lower() in QUIT:
      break
    if question:
      try:
        write(format_answer(asker.ask(question)) + "\n")
        answered += 1
      except ValueError as e:
        write(f"error: {e}\n")
    write(prompt)
  write("\n")
  return answered
