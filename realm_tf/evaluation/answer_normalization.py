"""Open-QA answer matching, as ORQA and DPR evaluate.

`exact_match`: equal after `normalize_answer` (ORQA's: NFD, lower case, no ASCII punctuation,
no a/an/the, whitespace collapsed). `regex_match` (CuratedTrec): ORQA's `regex_match_score`,
the gold pattern `re.match`ed (IGNORECASE | UNICODE | MULTILINE) at the start of the raw,
unnormalised prediction. `has_answer` (retrieval recall): DPR's; "string" finds the answer's
tokens contiguous in the block's (NFD, lower case, split as DPR's `SimpleTokenizer`), "regex"
`re.search`es the NFD block text.

Two departures, so that a broken answer file is noticed: an uncompilable pattern raises
`InvalidAnswerPattern` (ORQA scores a miss), and an answer with no tokens matches no block
(DPR finds it in every block).
"""
import functools
import re
import string
import unicodedata
from typing import Iterable, Tuple

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE


class InvalidAnswerPattern(ValueError):
  """A gold answer regex does not compile; the message names the pattern."""

  def __init__(self, pattern: str, error: re.error):
    super().__init__(f"invalid answer pattern {pattern!r}: {error}")
    self.pattern = pattern


def normalize_answer(text: str) -> str:
  """NFD, lowercase, strip punctuation, drop articles a/an/the, collapse whitespace.

  >>> normalize_answer("The  Beatles!")
  'beatles'
  """
  text = unicodedata.normalize("NFD", text).lower()
  text = "".join(ch for ch in text if ch not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


@functools.lru_cache(maxsize=4096)
def _compile(pattern: str) -> re.Pattern:
  try:
    return re.compile(pattern, flags=_REGEX_FLAGS)
  except re.error as error:
    raise InvalidAnswerPattern(pattern, error) from error


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
  """Whether the normalised prediction equals any normalised gold answer."""
  normalized = normalize_answer(prediction)
  return any(normalized == normalize_answer(answer) for answer in answers)


def regex_match(prediction: str, patterns: Iterable[str]) -> bool:
  """Whether any gold regex matches at the start of the raw prediction (case-insensitive).

  Raises:
    InvalidAnswerPattern: a pattern does not compile (every pattern is compiled, even after a
      match).
  """
  compiled = [_compile(pattern) for pattern in patterns]
  return any(regex.match(prediction) is not None for regex in compiled)


def _is_word_char(ch: str) -> bool:
  return unicodedata.category(ch)[0] in "LNM"


def _is_space_or_control(ch: str) -> bool:
  return unicodedata.category(ch)[0] in "ZC"


@functools.lru_cache(maxsize=1 << 16)
def _simple_tokens(text: str) -> Tuple[str, ...]:
  """DPR `SimpleTokenizer` words, lower-cased: letter/digit/mark runs or single symbols
  (cached: recall@k and the fine-tuning batches match the same blocks again and again)."""
  tokens, word = [], []
  for ch in text:
    if _is_word_char(ch):
      word.append(ch)
      continue
    if word:
      tokens.append("".join(word))
      word = []
    if not _is_space_or_control(ch):
      tokens.append(ch)
  if word:
    tokens.append("".join(word))
  return tuple(token.lower() for token in tokens)


def has_answer(text: str, answers: Iterable[str], match: str = "string") -> bool:
  """Whether a retrieved block contains an answer (DPR `has_answer`).

  Args:
    text: the block text.
    answers: gold answers ("string") or gold regexes ("regex").
    match: "string" (token-level containment) or "regex" (pattern search).

  Raises:
    InvalidAnswerPattern: with match="regex", a pattern does not compile.
    ValueError: an unknown `match`.
  """
  text = unicodedata.normalize("NFD", text)
  if match == "regex":
    compiled = [_compile(unicodedata.normalize("NFD", pattern)) for pattern in answers]
    return any(regex.search(text) is not None for regex in compiled)
  if match != "string":
    raise ValueError(f"match must be 'string' or 'regex', got {match!r}")
  tokens = _simple_tokens(text)
  for answer in answers:
    answer_tokens = _simple_tokens(unicodedata.normalize("NFD", answer))
    width = len(answer_tokens)
    if width and any(tokens[i:i + width] == answer_tokens
                     for i in range(len(tokens) - width + 1)):
      return True
  return False
