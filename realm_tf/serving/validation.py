"""Checks request bodies: `POST /v1/ask` bytes -> `AskRequest(question, top_k)`, `POST
/v1/classify` bytes -> `ClassifyRequest(texts, top_k)`, or a `BadRequest`.

Every rejection is a `BadRequest` carrying an HTTP status (400, or 413 for a body over the
size limit) and a one-line message in the project's `<where>: <problem>. <fix>.` style.
"""
import dataclasses
import json
import unicodedata
from typing import Any, Dict, Optional, Sequence, Tuple

from realm_tf.data import lone_surrogates
from realm_tf.errors import describe

ENDPOINT = "/v1/ask"
CLASSIFY_ENDPOINT = "/v1/classify"
FIELDS = ("question", "top_k")
CLASSIFY_FIELDS = ("text", "texts", "top_k")
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
    max_question_chars: longest question (or text to classify), in characters.
    max_texts: most texts in one `/v1/classify` request.
    num_blocks: blocks in the index.
    max_top_k: the largest `top_k` (at most `num_blocks` is used): the reader reads every
      block retrieved.
    default_top_k: `top_k` when the request has none.
  """
  max_body_bytes: int = 65536
  max_question_chars: int = 1000
  max_texts: int = 64
  num_blocks: int = 1
  max_top_k: int = 50
  default_top_k: int = 5


@dataclasses.dataclass(frozen=True)
class AskRequest:
  question: str
  top_k: int


@dataclasses.dataclass(frozen=True)
class ClassifyRequest:
  texts: Tuple[str, ...]
  top_k: int


def _bad(problem: str, fix: str = "", status: int = 400,
         endpoint: str = ENDPOINT) -> BadRequest:
  return BadRequest(describe(endpoint, problem, fix), status)


def body_too_large(size: int, limits: Limits, endpoint: str = ENDPOINT) -> BadRequest:
  return _bad(f"the request body has {size} bytes or more, over the limit of "
              f"{limits.max_body_bytes}", "Send a shorter body", status=413, endpoint=endpoint)


def parse_ask(body: bytes, limits: Limits) -> AskRequest:
  """The question and top_k of a request body.

  Raises:
    BadRequest: the body is too large, not UTF-8 JSON, not an object with a non-empty
      `question` string of at most `max_question_chars` characters without control
      characters, or `top_k` is not an integer in [1, min(num_blocks, max_top_k)].
  """
  values = _json_object(body, limits, ENDPOINT, FIELDS, 'Send {"question": "...", "top_k": 5}')
  return AskRequest(_text(values.get("question"), '"question"', limits, ENDPOINT),
                    _top_k(values.get("top_k"), limits, ENDPOINT))


def parse_classify(body: bytes, limits: Limits) -> ClassifyRequest:
  """The texts and top_k of a `/v1/classify` body: {"text": "..."} or {"texts": [...]} (at
  most `max_texts`, each checked as `parse_ask` checks a question) and an optional top_k.

  Raises:
    BadRequest: as `parse_ask`, or neither or both of "text" and "texts".
  """
  values = _json_object(body, limits, CLASSIFY_ENDPOINT, CLASSIFY_FIELDS,
                        'Send {"text": "...", "top_k": 5} or {"texts": ["...", "..."]}')
  bad = lambda problem, fix: _bad(problem, fix, endpoint=CLASSIFY_ENDPOINT)
  if ("text" in values) == ("texts" in values):
    raise bad('the body needs one of "text" and "texts"',
              'Send {"text": "..."} or {"texts": ["...", "..."]}')
  texts = values["texts"] if "texts" in values else [values["text"]]
  if not isinstance(texts, list) or not 1 <= len(texts) <= limits.max_texts:
    found = (f"{len(texts)} texts" if isinstance(texts, list) else
             f"a {type(texts).__name__}")
    raise bad(f'"texts" must be a list of 1 to {limits.max_texts} strings, got {found}',
              f"Send at most {limits.max_texts} texts a request")
  field = (lambda i: f'"texts"[{i}]') if "texts" in values else (lambda i: '"text"')
  return ClassifyRequest(
      tuple(_text(t, field(i), limits, CLASSIFY_ENDPOINT) for i, t in enumerate(texts)),
      _top_k(values.get("top_k"), limits, CLASSIFY_ENDPOINT))


def _json_object(body: bytes, limits: Limits, endpoint: str, fields: Sequence[str],
                 example: str) -> Dict[str, Any]:
  """The JSON object of `body`, holding only `fields`."""
  bad = lambda problem, fix: _bad(problem, fix, endpoint=endpoint)
  if len(body) > limits.max_body_bytes:
    raise body_too_large(len(body), limits, endpoint)
  try:
    text = body.decode("utf-8")
  except UnicodeDecodeError as e:
    raise bad(f"the request body is not UTF-8 (byte {e.start})", "Encode the JSON as UTF-8")
  try:
    values = json.loads(text)
  except json.JSONDecodeError as e:
    raise bad(f"the request body is not JSON ({e.msg} at character {e.pos})", example)
  except RecursionError:
    raise bad("the request body is JSON nested too deeply", example)
  if not isinstance(values, dict):
    raise bad(f"the request body is a JSON {type(values).__name__}, not an object", example)
  unknown = sorted(set(values) - set(fields))
  if unknown:
    raise bad(f"unknown field(s) {', '.join(map(repr, unknown))}",
              f"Send only {', '.join(fields)}")
  return values


def _text(text, field: str, limits: Limits, endpoint: str) -> str:
  """A question or a text to classify, named `field` in the messages."""
  bad = lambda problem, fix: _bad(problem, fix, endpoint=endpoint)
  if not isinstance(text, str):
    raise bad(f"{field} must be a string, got {type(text).__name__}",
              f"Send {field} as a JSON string")
  if not text.strip():
    raise bad(f"{field} is empty", "Send a text with at least one word")
  if len(text) > limits.max_question_chars:
    raise bad(f"{field} has {len(text)} characters, over the limit of "
              f"{limits.max_question_chars}", "Send a shorter text")
  control = _first_control(text)
  if control is not None:
    raise bad(f"{field} holds the control character U+{ord(text[control]):04X} "
              f"at character {control}", "Remove control characters from the text")
  surrogate = lone_surrogates.problem(text, field)
  if surrogate:
    raise bad(surrogate, lone_surrogates.FIX)
  return text


def _first_control(text: str) -> Optional[int]:
  for i, char in enumerate(text):
    if unicodedata.category(char) == "Cc" and char not in ALLOWED_CONTROLS:
      return i
  return None


def _top_k(top_k, limits: Limits, endpoint: str) -> int:
  if top_k is None:
    return min(limits.default_top_k, limits.num_blocks)
  largest = min(limits.num_blocks, limits.max_top_k)
  if isinstance(top_k, bool) or not isinstance(top_k, int):
    raise _bad(f'"top_k" must be an integer, got {json.dumps(top_k)}',
               f"Send an integer from 1 to {largest}", endpoint=endpoint)
  if not 1 <= top_k <= largest:
    why = (f"the index has {limits.num_blocks} blocks" if largest == limits.num_blocks else
           f"the server reads at most {limits.max_top_k} blocks per text")
    raise _bad(f'"top_k" is {top_k}, outside 1..{largest} ({why})',
               f"Send an integer from 1 to {largest}", endpoint=endpoint)
  return top_k
