"""Rule-based English sentence splitting over clean prose, as character spans.

`split_sentences(text)` returns [start, end) spans that cover every non-whitespace character of
`text` exactly once, in order (whitespace between sentences belongs to none). A boundary is
- a line break (paragraphs never share a sentence), or
- `.`, `!`, `?` or `…` (plus closing quotes/brackets) followed by whitespace and then an
  upper-case letter, a digit or an opening quote/bracket, unless the period ends a known
  abbreviation ("Dr.", "St.", "No. 5"), a dotted abbreviation ("U.S.", "e.g.") or a single
  initial ("J. R. R. Tolkien").

Decisions depend only on a few characters around the boundary, so splitting any run of whole
sentences cut from a text (a block) gives the same sentences as in the full text, which is
what lets the salient-span pipeline re-split blocks. Pure Python, no model: ~1M chars/s.
"""
import re
from typing import List, Tuple

# Lower-cased, without the final period.
ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt ft gen col lt sgt capt cmdr adm gov rep sen pres rev fr hon
vs etc e.g i.e cf al approx ca c fl r b d no nos vol vols pp p ch sec fig figs op ed eds
jan feb mar apr jun jul aug sep sept oct nov dec inc ltd co corp bros dept univ est
u.s u.k u.n a.d b.c e.u u.s.a u.s.s.r ph.d m.d b.a m.a d.c n.b viz incl
""".split())
# Possessive and anchored at a run's first character: a long run of "." is one step, not
# a backtracking search from each of its characters.
_TERMINATOR = re.compile(r"(?<![.!?\u2026])[.!?\u2026]++[\"'\u201d\u2019)\]]*+(?=\s)")
_NEXT_START = re.compile(r"\s+([\"'\u201c\u2018(\[]*)(\S)")


def _last_word(text: str, end: int) -> str:
  """The run of non-whitespace ending at `end`, scanned back from `end`: time proportional to
  the word, not to the text before it (a regex search from the line start is quadratic in
  a long line's terminators)."""
  start = end
  while start > 0 and not text[start - 1].isspace():
    start -= 1
  return text[start:end]


def _is_boundary(text: str, end: int, terminator: str) -> Tuple[bool, int]:
  """Whether a sentence ends at `end` (just after the terminator); returns (is, next start)."""
  following = _NEXT_START.match(text, end)
  if following is None:
    return False, end
  next_char = following.group(2)
  if not (next_char.isupper() or next_char.isdigit() or following.group(1)):
    return False, end
  if terminator.startswith(".") and len(terminator.rstrip("\"'\u201d\u2019)]")) == 1:
    word = _last_word(text, end - len(terminator)).lstrip("\"'(\u201c\u2018[").lower()
    if word in ABBREVIATIONS and not (word in ("etc", "al") and next_char.isupper() and
                                      not following.group(1)):
      return False, end
    if len(word) == 1 and word.isalpha():  # an initial: "J. Smith"
      return False, end
    if word.count(".") >= 1 and all(len(part) <= 2 for part in word.split(".")):
      # Dotted abbreviations ("U.S.", "e.g.", "Ph.D.") are more often inside a sentence.
      return False, end
  return True, following.start(1)


def split_sentences(text: str) -> List[Tuple[int, int]]:
  """Splits `text` into sentences.

  Args:
    text: clean prose; line breaks separate paragraphs.

  Returns:
    [(start, end)] character spans, in order; `text[start:end]` has no surrounding whitespace.
  """
  spans = []
  for line_match in re.finditer(r"[^\n]+", text):
    line_start, line = line_match.start(), line_match.group()
    start = len(line) - len(line.lstrip())
    if start == len(line):
      continue
    for terminator in _TERMINATOR.finditer(line):
      if terminator.start() < start:
        continue
      boundary, next_start = _is_boundary(line, terminator.end(), terminator.group())
      if boundary:
        spans.append((line_start + start, line_start + terminator.end()))
        start = next_start
    end = len(line.rstrip())
    if start < end:
      spans.append((line_start + start, line_start + end))
  return spans
