"""A fact-verification set from real text: NQ-open questions stated with their answer (true) or
another answer of the same type (false), split by the Wikipedia article holding the answer.

`build_claims` (deterministic for a seed): 1. each question (NQ-open dev or train only, never a
test set) is taken with its first answer some block holds (`demo.questions.AnswerFinder`, the
`has_answer` of recall@k); its evidence is the first such block, its article that block's
title. 2. `answer_type`: "year" (1000-2099), "number" (any other with a digit), "name" (every
word capitalised) or "other". 3. The claim is "<question>? <answer>." (no parser rewrites the
question). 4. A seeded permutation makes half the claims true, half false (before drops); a
false claim swaps in another question's answer of the same type, drawn by the seeded
generator, that is none of the question's answers and that its evidence block does not hold
(none in `_DRAWS` draws: the question is dropped). 5. A claim is test when sha256(article
title) mod 100 < `test_percent`: no test claim's evidence block or article is a training
claim's, whatever the seed.
"""
import dataclasses
import hashlib
import json
import re
from typing import Dict, List, Sequence

import numpy as np

from realm_tf.demo.questions import AnswerFinder
from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.evaluation.qa_example import QAExample

TYPES = ("year", "number", "name", "other")
_YEAR = re.compile(r"(1\d|20)\d\d")
_DRAWS = 20  # substitutes tried for a false claim


@dataclasses.dataclass(frozen=True)
class Claim:
  """One claim: its text and label ("true" / "false"), the question and answer it came from,
  the answer stated, the answer type, the evidence block (row, article title) and its split
  ("train" / "test")."""
  text: str
  label: str
  question: str
  answer: str
  stated: str
  kind: str
  row: int
  title: str
  split: str


def answer_type(answer: str) -> str:
  """"year", "number", "name" or "other" (module docstring, step 2)."""
  answer = answer.strip()
  if _YEAR.fullmatch(answer):
    return "year"
  if any(c.isdigit() for c in answer):
    return "number"
  words = answer.split()
  if words and all(w[0].isupper() for w in words if w[0].isalpha()) and any(
      w[0].isalpha() for w in words):
    return "name"
  return "other"


def claim_text(question: str, answer: str) -> str:
  """"<question>? <answer>." (module docstring, step 3)."""
  return f"{question.strip().rstrip('?').strip()}? {answer.strip()}."


def is_test(title: str, test_percent: int) -> bool:
  """Whether the article `title` falls in the test split (sha256 of the title mod 100)."""
  digest = hashlib.sha256(title.encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") % 100 < test_percent


def build_claims(titles: Sequence[str], texts: Sequence[str],
                 examples: Sequence[QAExample], seed: int,
                 test_percent: int = 30) -> List[Claim]:
  """The claims of `examples` over the blocks (`titles`, `texts`), in the examples' order
  (module docstring); questions no block answers are left out."""
  if not 0 < test_percent < 100:
    raise ValueError(f"test_percent must be in 1..99, got {test_percent}")
  finder = AnswerFinder(texts)
  found = []  # (example, answer, evidence row)
  for example in examples:
    if example.match != "string":
      continue
    for answer in example.answers:
      rows = finder.answer_rows(answer) if answer.strip() else []
      if rows:
        found.append((example, answer.strip(), rows[0]))
        break
  pools: Dict[str, List[str]] = {}
  for _, answer, _ in found:
    pools.setdefault(answer_type(answer), []).append(answer)
  pools = {kind: sorted(set(answers)) for kind, answers in pools.items()}
  rng = np.random.default_rng(seed)
  false = np.zeros(len(found), bool)
  false[rng.permutation(len(found))[len(found) // 2:]] = True
  claims = []
  for (example, answer, row), is_false in zip(found, false):
    kind = answer_type(answer)
    stated = answer
    if is_false:
      own = AnswerMatcher(example.answers)
      stated = ""
      for draw in rng.integers(0, len(pools[kind]), size=_DRAWS):
        other = pools[kind][draw]
        if not own.has_answer(other) and not AnswerMatcher([other]).has_answer(texts[row]):
          stated = other
          break
      if not stated:
        continue
    split = "test" if is_test(titles[row], test_percent) else "train"
    claims.append(Claim(claim_text(example.question, stated), "false" if is_false else "true",
                        example.question, answer, stated, kind, int(row), titles[row], split))
  return claims


def write_claims(path: str, claims: Sequence[Claim]) -> None:
  """`claims` as classification JSONL: "text" and "label", the rest of each `Claim` beside."""
  with open(path, "w", encoding="utf-8") as f:
    for claim in claims:
      f.write(json.dumps(dataclasses.asdict(claim)) + "\n")
