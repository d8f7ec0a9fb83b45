"""Checks `POST /v1/ask` bodies: bytes -> `AskRequest(question, top_k)`, or a `BadRequest`.

Every rejection is a `BadRequest` carrying an HTTP status (400, or 413 for a body over the
size limit) and a one-line message in the project's `<where>: <problem>. <fix>.` style.
"""
import dataclasses
import json
import unicodedata
from typing import Optional

from realm_tf.errors import describe

ENDPOINT = "/v1/ask"
FIELDS = ("question", "top_k")
ALLOWED_CONTROLS = "\t\n\r"


class BadRequest(ValueError):
  """A request the client must fix; `status` is the HTTP status to answer with."""

  def __init__(self, message: str, status: int = 400):
    super().__init__(message)
    self.status = status


@dataclasses.dataclass(frozen=True)
class Limits:
  """What a request may carry.

  Attributes:
    max_body_bytes: largest request body (413 above it).
    max_question_chars: longest question, in characters.
    num_blocks: blocks in the index.
    max_top_k: the largest `top_k` (at most `num_blocks` is used): the reader reads every
      block retrieved.
    default_top_k: `top_k` when the request has none.
  """
  max_body_bytes: int = 65536
  max_question_chars: int = 1000
  num_blocks: int = 1
  max_top_k: int = 50
  default_top_k: int = 5


@dataclasses.dataclass(frozen=True)
class AskRequest:
  question: str
  top_k: int


def _bad(problem: str, fix: str = "", status: int = 400) -> BadRequest:
  return BadRequest(describe(ENDPOINT, problem, fix), status)


def body_too_large(size: int, limits: Limits) -> BadRequest:
  return _bad(f"the request body has {size} bytes or more, over the limit of "
              f"{limits.max_body_bytes}", "Send a shorter question", status=413)


def parse_ask(body: bytes, limits: Limits) -> AskRequest:
  """The question and top_k of a request body.

  Raises:
    BadRequest: the body is too large, not UTF-8 JSON, not an object with a non-empty
      `question` string of at most `max_question_chars` characters without control
      characters, or `top_k` is not an integer in [1, min(num_blocks, max_top_k)].
  """
  example = 'Send {"question": "...", "top_k": 5}'
  if len(body) > limits.max_body_bytes:
    raise body_too_large(len(body), limits)
  try:
    text = body.decode("utf-8")
  except UnicodeDecodeError as e:
    raise _bad(f"the request body is not UTF-8 (byte {e.start})", "Encode the JSON as UTF-8")
  try:
    values = json.loads(text)
  except json.JSONDecodeError as e:
    raise _bad(f"the request body is not JSON ({e.msg} at character {e.pos})", example)
  except RecursionError:
    raise _bad("the request body is JSON nested too deeply", example)
  if not isinstance(values, dict):
    raise _bad(f"the request body is a JSON {type(values).__name__}, not an object", example)
  unknown = sorted(set(values) - set(FIELDS))
  if unknown:
    raise _bad(f"unknown field(s) {', '.join(map(repr, unknown))}",
               f"Send only {' and '.join(FIELDS)}")
  return AskRequest(_question(values.get("question"), limits),
                    _top_k(values.get("top_k"), limits))


def _question(question, limits: Limits) -> str:
  if not isinstance(question, str):
    raise _bad(f'"question" must be a string, got {type(question).__name__}',
               'Send {"question": "..."}')
  if not question.strip():
    raise _bad('"question" is empty', "Ask a question with at least one word")
  if len(question) > limits.max_question_chars:
    raise _bad(f'"question" has {len(question)} characters, over the limit of '
               f"{limits.max_question_chars}", "Ask a shorter question")
  control = _first_control(question)
  if control is not None:
    raise _bad(f'"question" holds the control character U+{ord(question[control]):04X} '
               f"at character {control}", "Remove control characters from the question")
  return question


def _first_control(text: str) -> Optional[int]:
  for i, char in enumerate(text):
    if unicodedata.category(char) == "Cc" and char not in ALLOWED_CONTROLS:
      return i
  return None


def _top_k(top_k, limits: Limits) -> int:
  if top_k is None:
    return min(limits.default_top_k, limits.num_blocks)
  if isinstance(top_k, bool) or not isinstance(top_k, int):
    raise _bad(f'"top_k" must be an integer, got {json.dumps(top_k)}',
               f"Send an integer from 1 to {min(limits.num_blocks, limits.max_top_k)}")
  largest = min(limits.num_blocks, limits.max_top_k)
  if not 1 <= top_k <= largest:
    why = (f"the index has {limits.num_blocks} blocks" if largest == limits.num_blocks else
           f"the server reads at most {limits.max_top_k} blocks per question")
    raise _bad(f'"top_k" is {top_k}, outside 1..{largest} ({why})',
               f"Send an integer from 1 to {largest}")
  return top_k
