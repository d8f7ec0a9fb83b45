"""Bad questions: empty, whitespace, 50,000 characters or control characters, asked (`ask`)
or read from an evaluation file (JSONL / TSV, named by file:line)."""
import json

import pytest

from realm_tf import errors
from realm_tf.qa import ask_lib
from realm_tf.qa import datasets

LONG = "who wrote hamlet " * 2942  # 50,014 characters

# case -> (question, the problem the error states, or the normalised question)
CASES = {
    "empty": ("", "empty question (nothing left but whitespace or control characters)"),
    "whitespace": (" \t\n ", "empty question (nothing left but whitespace or control "
                             "characters)"),
    "control_only": ("\x00\x07\x1b\x7f", "empty question (nothing left but whitespace or "
                                         "control characters)"),
    "50k_characters": (LONG, "question of 50,013 characters, more than the 10,000 a question "
                             "may have"),
    "control_characters": ("who\x00wrote \x1b[31mhamlet?\x07", "who wrote [31mhamlet?"),
    "format_characters": ("\ufeffwho wrote\u200b hamlet?", "who wrote hamlet?"),
    "newlines": ("who wrote\r\nhamlet?\n", "who wrote hamlet?"),
}
ERRORS = ("empty", "whitespace", "control_only", "50k_characters")


class _System:
  """Stands in for the retrieve-and-read system: echoes what it is asked."""

  def answer(self, questions):
    return list(questions)


def _asker():
  asker = ask_lib.Asker.__new__(ask_lib.Asker)
  asker.system = _System()
  return asker


@pytest.mark.parametrize("case", sorted(CASES))
def test_asked_question(case):
  question, expected = CASES[case]
  if case not in ERRORS:
    assert _asker().ask(question) == expected
    return
  with pytest.raises(errors.InputError) as error:
    _asker().ask_many(["who wrote hamlet?", question])
  assert str(error.value) == (f"question 2: {expected}. Ask a question in words, at most "
                              "10,000 characters.")


# A TSV line cannot hold a tab or a line break, so those cases are JSONL-only.
FILE_CASES = [(case, "jsonl") for case in sorted(CASES)] + [
    (case, "tsv") for case in sorted(CASES) if not set("\n\r\t") & set(CASES[case][0])]


@pytest.mark.parametrize("case,file_format", FILE_CASES)
def test_question_file_line(tmp_path, case, file_format):
  question, expected = CASES[case]
  if file_format == "jsonl":
    line = json.dumps({"question": question, "answer": ["Shakespeare"]})
  else:
    line = f"{question}\t['Shakespeare']"
  path = tmp_path / f"dev.{file_format}"
  path.write_text(_valid(file_format) + line + "\n", encoding="utf-8")
  if case not in ERRORS:
    examples = datasets.load_examples(str(path), "nq")
    assert [e.question for e in examples] == ["who wrote hamlet?", expected]
    assert examples[1].source == f"{path}:2"
    return
  with pytest.raises(errors.MalformedRecordError) as error:
    datasets.load_examples(str(path), "nq")
  assert isinstance(error.value, errors.InputError)
  assert str(error.value) == f"{path}:2: {expected}"
  assert (error.value.path, error.value.line) == (str(path), 2)


def _valid(file_format):
  if file_format == "jsonl":
    return '{"question": "who wrote hamlet?", "answer": ["Shakespeare"]}\n'
  return "who wrote hamlet?\t['Shakespeare']\n"


def test_an_asked_lone_surrogate_is_refused_by_position():
  # "\udce9": how Python decodes the byte 0xE9 of a non-UTF-8 command line (surrogateescape).
  with pytest.raises(errors.InputError) as error:
    _asker().ask_many(["who wrote hamlet?", "caf\udce9 owner?"])
  assert str(error.value) == ("question 2: the question holds the lone surrogate U+DCE9 at "
                              "character 3. Write the character itself, or escape both halves "
                              "of its UTF-16 surrogate pair.")
