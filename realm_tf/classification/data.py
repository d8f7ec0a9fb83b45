"""Classification data: JSONL lines `{"text": ..., "label": ...}` and the label set.

The label set is `task.labels` when given (every label of the data must be one of them), else
the sorted labels of the training file: one order for a run and its evaluation, written into
the model directory's `labels.json` so that a resumed run and its evaluation read it back.
"""
import dataclasses
import json
from typing import List, Sequence, Tuple

from realm_tf import errors
from realm_tf.data import lone_surrogates
from realm_tf.data.text_file import read_text_file

LABELS_FILE = "labels.json"


@dataclasses.dataclass(frozen=True)
class TextExample:
  """One text to classify, its label's name and its line in the file it came from."""
  text: str
  label: str
  line: int = 0


def load_examples(path: str) -> List[TextExample]:
  """The examples of a JSONL file, in file order.

  Raises:
    MalformedRecordError: a line that is not a JSON object with a non-empty string "text" and
      a string "label" (the message names the file and line), or a file that is not UTF-8.
    InputError: a directory, or a file without examples.
  """
  text = read_text_file(path, "a JSONL file", 'Pass a file of {"text": ..., "label": ...} lines')
  examples = []
  for number, line in enumerate(text.split("\n"), 1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise errors.MalformedRecordError(path, number, f"not JSON ({e.msg}). Write one "
                                        '{"text": ..., "label": ...} object a line') from e
    if not isinstance(record, dict) or not isinstance(record.get("text"), str) or not (
        record["text"].strip()) or not isinstance(record.get("label"), str):
      raise errors.MalformedRecordError(path, number, 'not an object with a non-empty string '
                                        '"text" and a string "label". Fix or drop the line')
    for field in ("text", "label"):
      surrogate = lone_surrogates.problem(record[field], f'"{field}"')
      if surrogate:
        raise errors.MalformedRecordError(path, number, f"{surrogate}. {lone_surrogates.FIX}")
    examples.append(TextExample(record["text"], record["label"], number))
  if not examples:
    raise errors.InputError(errors.describe(path, "holds no examples",
                                            'Pass a file of {"text": ..., "label": ...} lines'))
  return examples


def label_set(labels: Sequence[str], train_path: str,
              examples: Sequence[TextExample]) -> Tuple[str, ...]:
  """`labels`, or with none given the sorted labels of `examples` (those of `train_path`);
  fewer than two is an `InputError`."""
  found = tuple(labels) or tuple(sorted({e.label for e in examples}))
  if len(found) < 2:
    raise errors.InputError(errors.describe(
        train_path, f"has a single label {found!r}", "A classifier needs two or more labels: "
        "add examples of another label, or set task.labels"))
  return found


def label_ids(examples: Sequence[TextExample], labels: Sequence[str], path: str) -> List[int]:
  """The index in `labels` of each example's label.

  Raises:
    MalformedRecordError: an example's label is not in `labels` (naming its line of `path`).
  """
  index = {label: i for i, label in enumerate(labels)}
  ids = []
  for example in examples:
    if example.label not in index:
      raise errors.MalformedRecordError(
          path, example.line, f"label {example.label!r} is not one of the labels "
          f"{', '.join(labels)}. Fix the label, or set task.labels to include it")
    ids.append(index[example.label])
  return ids
