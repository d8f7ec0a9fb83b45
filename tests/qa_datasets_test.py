"""Question sets (ORQA JSONL, DPR TSV, pyserini): parsing and errors."""
import importlib.util
import json
import logging

import pytest

from realm_tf.errors import InputError
from realm_tf.errors import MalformedRecordError
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.qa import datasets
from realm_tf.qa import supervision


def _write(path, text):
  path.write_text(text, encoding="utf-8")
  return str(path)


def test_orqa_jsonl(tmp_path):
  path = _write(tmp_path / "nq.jsonl",
                '{"question": "who wrote hamlet?", "answer": ["William Shakespeare"]}\n\n'
                '{"question": " where is paris ", "answer": ["France", "FR"]}\n')
  examples = datasets.load_examples(path, "nq")
  assert [e.question for e in examples] == ["who wrote hamlet?", "where is paris"]
  assert examples[1].answers == ("France", "FR") and examples[1].match == "string"
  assert examples[1].source == f"{path}:3"


def test_dpr_tsv_with_csv_quoting(tmp_path):
  path = _write(tmp_path / "nq-dev.qa.csv",
                "who sings does he love me with reba\t['Linda Davis']\n"
                "who was the first woman appointed to the supreme court\t"
                "\"[\"\"Sandra Day O'Connor\"\"]\"\n"
                "list of companies\t\"['Walmart', \"\"McDonald 's\"\"]\"\n")
  examples = datasets.load_examples(path, "nq")
  assert examples[0].answers == ("Linda Davis",)
  assert examples[1].answers == ("Sandra Day O'Connor",)
  assert examples[2].answers == ("Walmart", "McDonald 's")


def test_format_sniffing_and_explicit_format(tmp_path):
  jsonl = _write(tmp_path / "wq.txt", '{"question": "q?", "answer": ["a"]}\n')
  tsv = _write(tmp_path / "nq.txt", "q?\t['a']\n")
  assert datasets.load_examples(jsonl, "wq")[0].answers == ("a",)
  assert datasets.load_examples(tsv, "nq")[0].answers == ("a",)
  with pytest.raises(MalformedRecordError, match="nq.txt:1: not valid JSON"):
    datasets.load_examples(tsv, "nq", file_format="jsonl")


_GOOD_LINES = {"jsonl": '{"question": "ok", "answer": ["a"]}', "tsv": "q\t['a']"}


@pytest.mark.parametrize("file_format, line, reason", [
    ("jsonl", '{"question": "q", "answer": ["a"]', "not valid JSON"),
    ("jsonl", '{"question": "q"}', 'expected an object with "question" and "answer"'),
    ("jsonl", '{"question": "", "answer": ["a"]}', "empty question"),
    ("jsonl", '{"question": "q", "answer": []}', "non-empty list of strings"),
    ("jsonl", '{"question": "q", "answer": [3]}', "must all be strings"),
    ("jsonl", '["q", ["a"]]', 'expected an object'),
    ("jsonl", '{"question": "who \\udc00", "answer": ["a"]}',
     "the question holds the lone surrogate U.DC00 at character 4. Write the character"),
    ("jsonl", '{"question": "q", "answer": ["a", "b\\ud800"]}',
     "answer 2 holds the lone surrogate U.D800 at character 1"),
    ("tsv", "just a question", "expected 2 tab-separated fields, got 1"),
    ("tsv", "q\t['a']\textra", "got 3"),
    ("tsv", "q\tnot a list", "not a Python list literal"),
    ("tsv", "\t['a']", "empty question"),
])
def test_a_malformed_line_is_named_by_file_and_line(tmp_path, file_format, line, reason):
  path = _write(tmp_path / f"bad.{file_format}", f"{_GOOD_LINES[file_format]}\n{line}\n")
  with pytest.raises(MalformedRecordError, match=reason) as info:
    datasets.load_examples(path, "nq")
  assert (info.value.path, info.value.line) == (path, 2)
  assert str(info.value).startswith(f"{path}:2: ")


def test_curatedtrec_regexes_are_checked_at_load_time(tmp_path):
  good = _write(tmp_path / "ct.jsonl",
                json.dumps({"question": "when?", "answer": [r"19[0-9]{2}"]}) + "\n")
  (example,) = datasets.load_examples(good, "curatedtrec")
  assert example.match == "regex"
  bad = _write(tmp_path / "ct_bad.jsonl",
               json.dumps({"question": "when?", "answer": ["1969"]}) + "\n" +
               json.dumps({"question": "who?", "answer": ["(Armstrong"]}) + "\n")
  with pytest.raises(MalformedRecordError, match=r"ct_bad.jsonl:2: invalid answer pattern "
                                                 r"'\(Armstrong'"):
    datasets.load_examples(bad, "curatedtrec")
  # The same text is a valid string answer for NQ.
  assert datasets.load_examples(bad, "nq")[1].answers == ("(Armstrong",)


def test_unknown_dataset_and_empty_file(tmp_path):
  with pytest.raises(ValueError, match="unknown dataset 'hotpotqa'"):
    datasets.load_examples(_write(tmp_path / "x.jsonl", ""), "hotpotqa")
  with pytest.raises(ValueError, match="no questions"):
    datasets.load_examples(_write(tmp_path / "empty.jsonl", "\n"), "nq")
  assert datasets.dataset_of("pyserini:curated-test", "nq") == "curatedtrec"
  with pytest.raises(ValueError, match="unknown pyserini question set"):
    datasets.load_examples("pyserini:nope")


def test_lines_end_at_newline_only(tmp_path):
  # U+0085 and U+2028 are line breaks to `str.splitlines`, not to DPR TSV or JSONL files.
  text = "who was\x85 first\t['A']\r\nwhat\u2028 next\t['B']\n\nbad line\n"
  with pytest.raises(MalformedRecordError, match=r"q\.tsv:4: expected 2 tab-separated"):
    datasets.load_examples(_write(tmp_path / "q.tsv", text), "nq")
  good = datasets.load_examples(_write(tmp_path / "ok.tsv", text.rsplit("bad", 1)[0]), "nq")
  assert [e.answers for e in good] == [("A",), ("B",)]
  assert [e.source.rsplit(":", 1)[1] for e in good] == ["1", "2"]


def test_write_jsonl_round_trip(tmp_path):
  examples = [datasets.QAExample("q1?", ("a", "é")), datasets.QAExample("q2?", ("b",))]
  datasets.write_jsonl(examples, str(tmp_path / "out.jsonl"))
  loaded = datasets.load_examples(str(tmp_path / "out.jsonl"), "nq")
  assert [(e.question, e.answers) for e in loaded] == [("q1?", ("a", "é")), ("q2?", ("b",))]


def test_question_file_byte_order_mark_accepted_other_encodings_named(tmp_path):
  bom = tmp_path / "bom.jsonl"
  bom.write_bytes(b"\xef\xbb\xbf" +
                  b'{"question": "who wrote hamlet?", "answer": ["Shakespeare"]}\n')
  assert [e.question for e in datasets.load_examples(str(bom), "nq")] == ["who wrote hamlet?"]
  latin1 = tmp_path / "latin1.tsv"
  latin1.write_bytes("who wrote hamlet?\t['Shakespeare']\nwhere is s\xe8te?\t['France']\n"
                     .encode("latin-1"))
  with pytest.raises(MalformedRecordError, match=rf"^{latin1}:2: not UTF-8 \(byte 44 .*as UTF-8$"):
    datasets.load_examples(str(latin1), "nq")


@pytest.mark.parametrize("text", ["", "\n", "  \n\t\n"])
def test_empty_or_blank_question_file_is_one_line_input_error(tmp_path, text):
  path = _write(tmp_path / "dev.jsonl", text)
  with pytest.raises(InputError, match=rf"^{path}: no questions .*\.$"):
    datasets.load_examples(path, "nq")
  with pytest.raises(InputError, match=rf"^{tmp_path}: is a directory, not a question file"):
    datasets.load_examples(str(tmp_path), "nq")
  with pytest.raises(InputError, match=r"^pyserini:nope: unknown pyserini question set"):
    datasets.load_examples("pyserini:nope")


def test_training_questions_the_corpus_never_answers_are_refused(caplog):
  examples = [QAExample("who wrote hamlet?", ("Shakespeare",)),
              QAExample("where is paris?", ("France",))]
  supervision.check_answerable(examples, ["Paris is in France."], "train.jsonl", "c.jsonl")
  with pytest.raises(InputError, match=r"^train.jsonl: none of its 2 questions has an answer "
                     r"in any of the 1 blocks of c.jsonl: .* \(--corpus\).*\.$"):
    supervision.check_answerable(examples, ["Rome is in Italy."], "train.jsonl", "c.jsonl")
  # A corpus too large to match every question against: a sample, and a warning.
  with caplog.at_level(logging.WARNING):
    supervision.check_answerable(examples, ["Rome.", "Italy."], "train.jsonl", "c.jsonl",
                                 max_pairs=3)
  assert "train.jsonl: none of its first 1 questions has an answer" in caplog.text


@pytest.mark.skipif(importlib.util.find_spec("pyserini") is None,
                    reason="pip install --no-deps pyserini==0.21.0")
def test_pyserini_question_sets():
  nq_dev = datasets.load_examples("pyserini:nq-dev")
  assert len(nq_dev) == 8757
  assert nq_dev[0].question == "who sings does he love me with reba"
  assert nq_dev[0].answers == ("Linda Davis",)
  assert len(datasets.load_examples("pyserini:nq-test")) == 3610
  wq = datasets.load_examples("pyserini:wq-test")
  assert len(wq) == 2032 and wq[0].answers == ("Jamaican Creole English Language",
                                               "Jamaican English")
  curated = datasets.load_pyserini_topics("curated-test")
  assert len(curated) == 694 and all(e.match == "regex" for e in curated)
  assert curated[0].answers[0].startswith(r"20\s?,?\s?(32|40)0")
  trivia = datasets.load_examples("pyserini:trivia-dev")
  assert len(trivia) == 8837  # line 478 holds U+0085 inside its question
  assert trivia[477].source.endswith(":478") and "\x85" not in trivia[477].question
  squad = datasets.load_examples("pyserini:squad-dev")  # SQuAD 1.1 dev, DPR's "test" file
  assert len(squad) == 10570 and squad[0].match == "string"
  assert squad[0].question == "Which NFL team represented the AFC at Super Bowl 50?"
  assert squad[0].answers[0] == "Denver Broncos"
