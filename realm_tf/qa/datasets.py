"""Open-QA question sets (NaturalQuestions-Open, WebQuestions, CuratedTrec), one per line:

* ORQA JSONL: `{"question": "who wrote hamlet?", "answer": ["William Shakespeare"]}`;
* DPR TSV: `who wrote hamlet?<TAB>['William Shakespeare']`, the answers a Python list literal,
  CSV-quoted where needed (`"[""O'Connor""]"`), as in DPR's `nq-dev.qa.csv`;
* `pyserini:<name>` (e.g. `pyserini:nq-dev`): the sets packaged in `pyserini==0.21.0`
  (`pip install --no-deps`), read from the Anserini jar with `zipfile`, no Java.

CuratedTrec answers are regular expressions (`match="regex"`), compiled at load time so that a
bad one fails there; any malformed record raises `errors.MalformedRecordError` naming the file
and line. Questions from a file or asked (`qa.ask_lib`) are normalised alike
(`normalize_question`: control characters become spaces, format characters such as zero-width
spaces are dropped, whitespace runs become one space); one empty after that, or longer than
`MAX_QUESTION_CHARS`, is an error.
"""
import ast
import csv
import importlib.util
import json
import os
import unicodedata
import zipfile
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from realm_tf import errors
from realm_tf.data import lone_surrogates
from realm_tf.data.text_file import read_text_file
from realm_tf.errors import MalformedRecordError
from realm_tf.evaluation import InvalidAnswerPattern
from realm_tf.evaluation import regex_match
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.evaluation.qa_example import dataset_spec

PYSERINI_PREFIX = "pyserini:"
PYSERINI_JAR = os.path.join("resources", "jars", "anserini-0.21.0-fatjar.jar")
# pyserini name -> (member of the Anserini jar, dataset).
PYSERINI_TOPICS = {
    "nq-dev": ("topics-and-qrels/topics.dpr.nq.dev.txt", "nq"),
    "nq-test": ("topics-and-qrels/topics.dpr.nq.test.txt", "nq"),
    "trivia-dev": ("topics-and-qrels/topics.dpr.trivia.dev.txt", "trivia"),
    # SQuAD 1.1's dev set, which DPR (and so pyserini, as "dpr-squad-test") uses as its test
    # split; no benchmark here evaluates on SQuAD, so it may add training questions.
    "squad-dev": ("topics-and-qrels/topics.dpr.squad.test.txt", "squad"),
    "wq-test": ("topics-and-qrels/topics.dpr.wq.test.txt", "wq"),
    "curated-test": ("topics-and-qrels/topics.dpr.curated.test.txt", "curatedtrec"),
}
FORMATS = ("auto", "jsonl", "tsv")
# The query tower reads its first 64 wordpieces (ORQA) and ignores the rest; 10,000 characters
# are far more than any question, and bound the tokenizer's work per question.
MAX_QUESTION_CHARS = 10000


def normalize_question(question: str) -> str:
  """`question` with control characters (Unicode Cc: NUL, escape, DEL, ...) as spaces, format
  characters (Cf) dropped, whitespace runs as one space and no space at either end."""
  kept = []
  for char in question:
    category = unicodedata.category(char)
    if category == "Cc":
      kept.append(" ")
    elif category not in ("Cf", "Cs"):
      kept.append(char)
  return " ".join("".join(kept).split())


def question_problem(question: str) -> Optional[str]:
  """Why a normalised question cannot be asked, or None."""
  if not question:
    return "empty question (nothing left but whitespace or control characters)"
  if len(question) > MAX_QUESTION_CHARS:
    return (f"question of {len(question):,} characters, more than the "
            f"{MAX_QUESTION_CHARS:,} a question may have")
  return None


def check_question(question, number: int) -> str:
  """The normalised `question` (the `number`-th asked, 1-based).

  Raises:
    errors.InputError: not a string, empty or too long (see `question_problem`).
  """
  if not isinstance(question, str):
    raise errors.InputError(errors.describe(
        f"question {number}", f"not a string: {question!r}", "Ask questions as text"))
  surrogate = lone_surrogates.problem(question, "the question")
  if surrogate:
    raise errors.InputError(errors.describe(f"question {number}", surrogate,
                                            lone_surrogates.FIX))
  normalised = normalize_question(question)
  problem = question_problem(normalised)
  if problem:
    raise errors.InputError(errors.describe(
        f"question {number}", problem,
        f"Ask a question in words, at most {MAX_QUESTION_CHARS:,} characters"))
  return normalised


def _check_no_surrogate(path: str, line: int, field: str, text: str) -> None:
  surrogate = lone_surrogates.problem(text, field)
  if surrogate:
    raise MalformedRecordError(path, line, f"{surrogate}. {lone_surrogates.FIX}")


def _check_record(path: str, line: int, question, answers, match: str) -> QAExample:
  if not isinstance(question, str):
    raise MalformedRecordError(path, line, f"question must be a string, got {question!r}")
  _check_no_surrogate(path, line, "the question", question)
  question = normalize_question(question)
  problem = question_problem(question)
  if problem:
    raise MalformedRecordError(path, line, problem)
  if not isinstance(answers, (list, tuple)) or not answers:
    raise MalformedRecordError(path, line,
                               f"answers must be a non-empty list of strings, got {answers!r}")
  if not all(isinstance(a, str) for a in answers):
    raise MalformedRecordError(path, line, f"answers must all be strings, got {answers!r}")
  for i, answer in enumerate(answers):
    _check_no_surrogate(path, line, f"answer {i + 1}", answer)
  if match == "regex":
    try:
      regex_match("", answers)  # compiles every pattern
    except InvalidAnswerPattern as e:
      raise MalformedRecordError(path, line, str(e)) from e
  return QAExample(question=question, answers=tuple(answers), match=match,
                   source=f"{path}:{line}")


def parse_jsonl(lines: Iterable[str], path: str, match: str) -> Iterator[QAExample]:
  """Parses ORQA JSONL records (`{"question": ..., "answer": [...]}`); blank lines skipped."""
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise MalformedRecordError(path, number, f"not valid JSON ({e.msg})") from e
    if not isinstance(record, dict) or "question" not in record or "answer" not in record:
      raise MalformedRecordError(path, number,
                                 'expected an object with "question" and "answer"')
    yield _check_record(path, number, record["question"], record["answer"], match)


def parse_tsv(lines: Iterable[str], path: str, match: str) -> Iterator[QAExample]:
  """Parses DPR TSV records (`question<TAB>['a', 'b']`, CSV-quoted); blank lines skipped."""
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      fields = next(csv.reader([line.rstrip("\r\n")], delimiter="\t"))
    except csv.Error as e:
      raise MalformedRecordError(path, number, f"bad TSV quoting ({e})") from e
    if len(fields) != 2:
      raise MalformedRecordError(path, number,
                                 f"expected 2 tab-separated fields, got {len(fields)}")
    try:
      answers = ast.literal_eval(fields[1])
    except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
      raise MalformedRecordError(
          path, number, f"answer field is not a Python list literal: {fields[1][:80]!r}") from e
    yield _check_record(path, number, fields[0], answers, match)


def _sniff_format(path: str, lines: Sequence[str]) -> str:
  extension = os.path.splitext(path)[1].lower()
  if extension in (".jsonl", ".json"):
    return "jsonl"
  if extension in (".tsv", ".csv"):
    return "tsv"
  first = next((line for line in lines if line.strip()), "")
  return "jsonl" if first.lstrip().startswith("{") else "tsv"


def parse_examples(text: str, path: str, match: str, file_format: str = "auto") -> List[QAExample]:
  """Parses a whole question-set file's text (see `load_examples`)."""
  if file_format not in FORMATS:
    raise ValueError(f"file_format must be one of {FORMATS}, got {file_format!r}")
  # Lines end at "\n" only: `str.splitlines` would also split inside a question at U+0085 or
  # U+2028 (TriviaQA dev has them), misnumbering every later line.
  lines = [line.rstrip("\r") for line in text.split("\n")]
  if file_format == "auto":
    file_format = _sniff_format(path, lines)
  parse = parse_jsonl if file_format == "jsonl" else parse_tsv
  examples = list(parse(lines, path, match))
  if not examples:
    raise errors.InputError(errors.describe(
        path, "no questions (the file is empty or holds only blank lines)",
        "Pass a question file with one question per line (ORQA JSONL or DPR TSV)"))
  return examples


def pyserini_jar() -> str:
  """The Anserini jar shipped with `pyserini==0.21.0`."""
  spec = importlib.util.find_spec("pyserini")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        "pyserini is not installed: pip install --no-deps pyserini==0.21.0")
  jar = os.path.join(spec.submodule_search_locations[0], PYSERINI_JAR)
  if not os.path.exists(jar):
    raise FileNotFoundError(f"pyserini is installed but {jar} is missing")
  return jar


def _pyserini_topics(name: str) -> Tuple[str, str]:
  """(jar member, dataset) of pyserini question set `name`; InputError if there is none."""
  if name not in PYSERINI_TOPICS:
    raise errors.InputError(errors.describe(
        f"{PYSERINI_PREFIX}{name}", "unknown pyserini question set",
        f"Pass one of {', '.join(PYSERINI_PREFIX + n for n in sorted(PYSERINI_TOPICS))}"))
  return PYSERINI_TOPICS[name]


def load_pyserini_topics(name: str) -> List[QAExample]:
  """Loads a DPR question set from the Anserini jar in pyserini (no Java needed).

  Args:
    name: one of `PYSERINI_TOPICS`: "nq-dev" (8,757), "nq-test" (3,610), "trivia-dev"
      (8,837), "squad-dev" (10,570), "wq-test" (2,032), "curated-test" (694, regex answers).
  """
  member, dataset = _pyserini_topics(name)
  jar = pyserini_jar()
  with zipfile.ZipFile(jar) as archive:
    text = archive.read(member).decode("utf-8")
  return parse_examples(text, f"{jar}!{member}", dataset_spec(dataset).match)


def load_examples(path: str, dataset: str = "nq", file_format: str = "auto") -> List[QAExample]:
  """Loads a question set.

  Args:
    path: an ORQA JSONL or DPR TSV file (any `tf.io.gfile` path), or `pyserini:<name>` for a
      question set packaged in pyserini (its own dataset then applies).
    dataset: "nq", "wq" or "curatedtrec"; decides string or regex answer matching.
    file_format: "auto" (by extension: .jsonl/.json, .tsv/.csv; otherwise by the first record),
      "jsonl" or "tsv".

  Returns:
    the examples in file order.

  Raises:
    MalformedRecordError: a record is malformed, the file is not UTF-8 (a byte-order mark is
      skipped), or a CuratedTrec pattern does not compile.
    InputError: a directory, a file without questions, an unknown pyserini set.
    ValueError: an unknown dataset or format.
  """
  if path.startswith(PYSERINI_PREFIX):
    return load_pyserini_topics(path[len(PYSERINI_PREFIX):])
  match = dataset_spec(dataset).match
  text = read_text_file(path, "a question file", "Pass the JSONL or TSV file")
  return parse_examples(text, path, match, file_format)


def dataset_of(path: str, dataset: str) -> str:
  """The dataset a path holds: a pyserini set's own, else `dataset`."""
  if path.startswith(PYSERINI_PREFIX):
    return _pyserini_topics(path[len(PYSERINI_PREFIX):])[1]
  dataset_spec(dataset)
  return dataset


def write_jsonl(examples: Iterable[QAExample], path: str) -> None:
  """Writes examples as ORQA JSONL."""
  with tf.io.gfile.GFile(path, "w") as f:
    for example in examples:
      f.write(json.dumps({"question": example.question, "answer": list(example.answers)},
                         ensure_ascii=False) + "\n")
