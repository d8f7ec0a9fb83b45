"""Weak supervision for Open-QA fine-tuning: which blocks and spans hold the answer.

Legend: B questions, K retrieved blocks, k read blocks, L reader length, A gold spans, T
wordpieces.

* `AnswerMatcher.has_answer(text)`: exactly `realm_tf.evaluation.has_answer` (the function
  evaluation's recall@k uses), behind a cheap substring pre-check that can only say "no" when
  `has_answer` would, so the retriever loss over thousands of blocks per question stays cheap.
* `AnswerMatcher.answer_strings(text)`: the strings whose wordpieces mark a correct span in a
  block: each gold answer and its `normalize_answer` form ("The Beatles" also matches a bare
  "beatles"); for regex answers (CuratedTrec) every non-empty match of a pattern in the block.
* `gold_spans`: every occurrence of those wordpiece sequences inside the block body of a
  reader input `[CLS] x [SEP] z_body [SEP]`, as (start, end) positions in that input (the
  positions `SpanScorer` enumerates), width <= max_span_width, padded with -1. ORQA matches on
  wordpieces the same way.
"""
import re
import unicodedata
from typing import Iterable, List, Sequence, Set, Tuple

import numpy as np

from realm_tf.evaluation import has_answer
from realm_tf.evaluation import normalize_answer
from realm_tf.evaluation.answer_normalization import InvalidAnswerPattern

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


def find_spans(tokens: Sequence[int], answer_tokens: Iterable[Sequence[int]],
               max_span_width: int) -> List[Tuple[int, int]]:
  """Every (start, end) (inclusive) where an answer's wordpieces occur in `tokens`, in order.

  Args:
    tokens: [T] wordpiece ids.
    answer_tokens: wordpiece id sequences; empty ones and those wider than `max_span_width`
      never match.
    max_span_width: the longest span the reader scores.
  """
  tokens = list(tokens)
  spans = set()
  for answer in answer_tokens:
    answer = list(answer)
    width = len(answer)
    if not 1 <= width <= max_span_width:
      continue
    first = answer[0]
    for i in range(len(tokens) - width + 1):
      if tokens[i] == first and tokens[i:i + width] == answer:
        spans.add((i, i + width - 1))
  return sorted(spans)


def gold_spans(input_word_ids: np.ndarray, block_mask: np.ndarray,
               answer_tokens: Sequence[Sequence[Sequence[int]]], max_span_width: int,
               max_spans: int) -> Tuple[np.ndarray, np.ndarray]:
  """Gold answer spans of the reader inputs of one question's read blocks.

  Args:
    input_word_ids: int [k, L] reader inputs `[CLS] x [SEP] z_body [SEP]`.
    block_mask: int [k, L], 1 exactly on the z_body wordpieces.
    answer_tokens: for each of the k blocks, the wordpiece sequences of its answer strings.
    max_span_width: the longest span the reader scores.
    max_spans: A; further occurrences are dropped.

  Returns:
    starts, ends: int32 [k, A] positions in the reader input (inclusive ends), -1 padded.
  """
  input_word_ids = np.asarray(input_word_ids)
  block_mask = np.asarray(block_mask).astype(bool)
  num_blocks = input_word_ids.shape[0]
  starts = np.full([num_blocks, max_spans], -1, np.int32)
  ends = np.full([num_blocks, max_spans], -1, np.int32)
  for block in range(num_blocks):
    positions = np.flatnonzero(block_mask[block])
    if not positions.size:
      continue
    body = input_word_ids[block, positions[0]:positions[-1] + 1]
    spans = find_spans(body.tolist(), answer_tokens[block], max_span_width)[:max_spans]
    for a, (start, end) in enumerate(spans):
      starts[block, a] = positions[0] + start
      ends[block, a] = positions[0] + end
  return starts, ends
