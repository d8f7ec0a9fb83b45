"""Weak supervision for Open-QA fine-tuning: which blocks and spans hold the answer.

Which blocks hold an answer, and which strings mark a correct span, is
`evaluation.answer_matcher.AnswerMatcher`: the matching evaluation's recall@k uses.
`gold_spans`: for the k reader inputs `[CLS] x [SEP] z_body [SEP]` [k, L] of a question, every
occurrence of the answer strings' wordpieces in a body, as inclusive (start, end) positions in
the input (those `SpanScorer` enumerates), width <= max_span_width: int32 [k, A] each, -1
padded. As in ORQA, the match is on wordpieces; given the "##" pieces, only whole words count
("seven" is not gold inside "sevens" = seven ##s), since a cut word's text cannot equal the
answer. `check_answerable` refuses a training set none of whose answers any block holds: it
would train to the end with loss 0 and exact match 0.
"""
from typing import Iterable, List, Optional, Sequence, Tuple

from absl import logging
import numpy as np

from realm_tf import errors
from realm_tf.evaluation.answer_matcher import AnswerMatcher

CHECKED_QUESTIONS = 1000  # enough to find an answerable one in any usable training set
CHECKED_PAIRS = 2_000_000  # (question, block) matches at most: seconds, also on a full Wikipedia


def find_spans(tokens: Sequence[int], answer_tokens: Iterable[Sequence[int]],
               max_span_width: int,
               continuation: Optional[np.ndarray] = None) -> List[Tuple[int, int]]:
  """Every (start, end) (inclusive) where an answer's wordpieces occur in `tokens`, in order.

  Args:
    tokens: [T] wordpiece ids.
    answer_tokens: wordpiece id sequences; empty ones and those wider than `max_span_width`
      never match.
    max_span_width: the longest span the reader scores.
    continuation: optional bool [V], True for the "##" wordpieces; given, an occurrence that
      starts on one or is followed by one (a part of a word) does not count.
  """
  tokens = list(tokens)
  inside = [continuation is not None and bool(continuation[t]) for t in tokens] + [False]
  spans = set()
  for answer in answer_tokens:
    answer = list(answer)
    width = len(answer)
    if not 1 <= width <= max_span_width:
      continue
    first = answer[0]
    for i in range(len(tokens) - width + 1):
      if tokens[i] == first and tokens[i:i + width] == answer:
        if not (inside[i] or inside[i + width]):
          spans.add((i, i + width - 1))
  return sorted(spans)


def gold_spans(input_word_ids: np.ndarray, block_mask: np.ndarray,
               answer_tokens: Sequence[Sequence[Sequence[int]]], max_span_width: int,
               max_spans: int, continuation: Optional[np.ndarray] = None
               ) -> Tuple[np.ndarray, np.ndarray]:
  """Gold answer spans of the reader inputs of one question's read blocks.

  Args:
    input_word_ids: int [k, L] reader inputs `[CLS] x [SEP] z_body [SEP]`.
    block_mask: int [k, L], 1 exactly on the z_body wordpieces.
    answer_tokens: for each of the k blocks, the wordpiece sequences of its answer strings.
    max_span_width: the longest span the reader scores.
    max_spans: A; further occurrences are dropped.
    continuation: optional bool [V] of the "##" wordpieces: whole-word occurrences only
      (`find_spans`).

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
    spans = find_spans(body.tolist(), answer_tokens[block], max_span_width,
                       continuation)[:max_spans]
    for a, (start, end) in enumerate(spans):
      starts[block, a] = positions[0] + start
      ends[block, a] = positions[0] + end
  return starts, ends


def check_answerable(examples: Sequence, texts: Sequence[str], train_data: str,
                     corpus: str, max_pairs: int = CHECKED_PAIRS) -> None:
  """Raises `InputError` when none of the first `CHECKED_QUESTIONS` training questions has an
  answer in any block text; stops at the first that has one. Where that would take more than
  `max_pairs` question-block matches, fewer questions are checked and none answerable is
  only a warning (a sample).

  Args:
    examples: `QAExample`s (answers and match).
    texts: the corpus's block texts.
    train_data, corpus: their paths, for the message.
    max_pairs: the most question-block matches made.
  """
  wanted = min(len(examples), CHECKED_QUESTIONS)
  checked = examples[:min(wanted, max_pairs // max(1, len(texts)))]
  for example in checked:
    matcher = AnswerMatcher(example.answers, example.match)
    if any(matcher.has_answer(text) for text in texts):
      return
  problem = (f"none of its {'first ' if len(examples) > len(checked) else ''}"
             f"{len(checked):,} questions has an answer in any of the {len(texts):,} blocks "
             f"of {corpus}: fine-tuning would learn nothing (loss 0, exact match 0)")
  fix = "Pass the corpus these questions are about (--corpus), or questions about this corpus"
  if len(checked) < wanted:
    if checked:
      logging.warning("%s", errors.describe(train_data, problem, fix))
    return
  raise errors.InputError(errors.describe(train_data, problem, fix))
