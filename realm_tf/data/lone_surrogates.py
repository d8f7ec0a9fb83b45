"""Lone surrogates in user text: a JSON string may hold "\\ud800", half of a UTF-16 pair, which
decodes to no Unicode character. It cannot be encoded as UTF-8, so TensorFlow's string
conversion fails on it deep in a model; every reader of user JSON refuses it first, naming the
field and the character position, as a control character is refused.
"""
from typing import Optional

FIX = "Write the character itself, or escape both halves of its UTF-16 surrogate pair"


def position(text: str) -> Optional[int]:
  """The 0-based character position of the first lone surrogate in `text`, or None."""
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as e:
    return e.start
  return None


def problem(text: str, field: str) -> Optional[str]:
  """Why `text` (named `field` in the message) is no text, or None."""
  at = position(text)
  if at is None:
    return None
  return f"{field} holds the lone surrogate U+{ord(text[at]):04X} at character {at}"
