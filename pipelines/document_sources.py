"""Beam sources of clean documents: MediaWiki XML dumps and JSONL `{title, text}` files.

Both produce `Document`s (title + clean prose, paragraphs separated by "\\n"; a dump's also
where its sections start) and send what they cannot use to the `DEAD_LETTER` output with the
source file, offset, title and reason.

`ReadWikipediaDump`: file patterns -> one reader per file (the split `pages-articlesN` dump
files read in parallel) -> pages, streamed -> Reshuffle (spreads them over workers) ->
main-namespace articles without redirects and disambiguation pages -> wikitext cleaned with
mwparserfromhell. Counters: `pages_read`, `pages_kept`, `pages_dropped_{redirect,namespace,
disambiguation}`, `pages_dead_letter`, `dumps_truncated`. `ReadJsonlDocuments`: lines
`{"title": ..., "text": ...}` of plain prose (a leading UTF-8 BOM skipped); counters
`documents_read`, `documents_kept`, `documents_dead_letter`.
"""
import dataclasses
import json
import re
from typing import Iterable, List, Sequence, Tuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io import filesystem
from apache_beam.io import filesystems

from pipelines import beam_runner
from pipelines import dead_letter
from pipelines import dump_reader
from pipelines import wikitext_cleaner
from realm_tf.data import lone_surrogates

_SPACES = re.compile(r"[^\S\n]+")
_UTF8_BOM = b"\xef\xbb\xbf"


@dataclasses.dataclass
class Document:
  """An article as clean prose.

  Attributes:
    title: the title.
    text: clean prose, paragraphs separated by "\\n", no empty lines.
    source: the input file.
    offset: byte offset of the page in the decompressed dump, or 1-based line of a JSONL file.
    section_starts: ascending character offsets in `text` where its sections start (the lead
      at 0, then each level-2 heading's; `wikitext_cleaner.clean_wikitext_sections`); ()
      where the source has no headings (JSONL): the whole text is one section.
  """
  title: str
  text: str
  source: str
  offset: int
  section_starts: Tuple[int, ...] = ()


class _ReadDumpPagesFn(beam.DoFn):
  """A dump file path -> its `dump_reader.Page`s; a broken dump adds one dead letter."""

  def __init__(self, max_page_bytes: int):
    super().__init__()
    self._max_page_bytes = max_page_bytes
    self._pages_read = beam_runner.counter("pages_read")
    self._truncated = beam_runner.counter("dumps_truncated")

  def process(self, path: str):
    with filesystems.FileSystems.open(
        path, compression_type=filesystem.CompressionTypes.UNCOMPRESSED) as raw:
      try:
        for page in dump_reader.iter_dump_file(path, raw,
                                               max_page_bytes=self._max_page_bytes):
          self._pages_read.inc()
          yield page
      except dump_reader.DumpTruncatedError as e:
        self._truncated.inc()
        yield dead_letter.tagged(path, e.offset, e.last_title, "read_dump", str(e))


class _CleanPageFn(beam.DoFn):
  """`Page` -> `Document` for kept articles; counted drops; dead letters for bad pages."""

  def __init__(self, max_unparsed_fraction: float):
    super().__init__()
    self._max_unparsed_fraction = max_unparsed_fraction
    self._counters = {name: beam_runner.counter(name) for name in (
        "pages_kept", "pages_dropped_redirect", "pages_dropped_namespace",
        "pages_dropped_disambiguation", "pages_dead_letter")}

  def _dead(self, page: dump_reader.Page, reason: str):
    self._counters["pages_dead_letter"].inc()
    return dead_letter.tagged(page.source, page.offset, page.title, "clean_page", reason)

  def process(self, page: dump_reader.Page):
    if page.redirect is not None:
      self._counters["pages_dropped_redirect"].inc()
      return
    if page.namespace != 0:
      self._counters["pages_dropped_namespace"].inc()
      return
    if not page.title.strip():
      yield self._dead(page, "no title: the page has no <title> element, or an empty one")
      return
    if page.invalid_utf8_bytes:
      yield self._dead(page, f"invalid UTF-8: {page.invalid_utf8_bytes} bytes")
      return
    if page.invalid_char_refs:
      yield self._dead(page, f"invalid character references: {page.invalid_char_refs} to "
                       "characters XML forbids (e.g. &#xD800;, &#xFFFE;) in the title or text")
      return
    if page.over_long:
      yield self._dead(page, f"over-long page: {page.text_bytes} bytes of wikitext, more than "
                       "--max_page_bytes")
      return
    if not page.text.strip():
      yield self._dead(page, "empty page: no wikitext")
      return
    if wikitext_cleaner.is_disambiguation(page.title, page.text):
      self._counters["pages_dropped_disambiguation"].inc()
      return
    try:
      text, section_starts = wikitext_cleaner.clean_wikitext_sections(
          page.text, self._max_unparsed_fraction)
    except wikitext_cleaner.MalformedWikitextError as e:
      yield self._dead(page, f"malformed wikitext: {e}")
      return
    if not text:
      yield self._dead(page, "empty page: no prose after cleaning")
      return
    self._counters["pages_kept"].inc()
    yield Document(page.title, text, page.source, page.offset, section_starts)


class ReadWikipediaDump(beam.PTransform):
  """MediaWiki XML dump files (`.xml`, `.xml.bz2`, `.xml.gz`) -> clean `Document`s.

  Returns {"documents": `Document`s, "dead_letter": dead-letter records}.

  Args:
    patterns: file patterns (any Beam filesystem).
    max_page_bytes: pages with more wikitext go to the dead-letter output.
    max_unparsed_fraction: see `wikitext_cleaner.clean_wikitext`.
  """

  def __init__(self, patterns: Sequence[str], max_page_bytes: int = 4 << 20,
               max_unparsed_fraction: float = 0.25):
    super().__init__()
    self.patterns = list(patterns)
    self.max_page_bytes = max_page_bytes
    self.max_unparsed_fraction = max_unparsed_fraction

  def expand(self, pbegin):
    files = (pbegin
             | "Patterns" >> beam.Create(self.patterns)
             | "Match" >> fileio.MatchAll()
             | "Paths" >> beam.Map(lambda metadata: metadata.path)
             | "SpreadFiles" >> beam.Reshuffle())
    pages = files | "ReadPages" >> beam.ParDo(_ReadDumpPagesFn(self.max_page_bytes)).with_outputs(
        dead_letter.DEAD_LETTER, main="pages")
    cleaned = (pages.pages
               | "SpreadPages" >> beam.Reshuffle()
               | "Clean" >> beam.ParDo(_CleanPageFn(self.max_unparsed_fraction)).with_outputs(
                   dead_letter.DEAD_LETTER, main="documents"))
    dead = ((pages[dead_letter.DEAD_LETTER], cleaned[dead_letter.DEAD_LETTER])
            | "DeadLetters" >> beam.Flatten())
    return {"documents": cleaned.documents, dead_letter.DEAD_LETTER: dead}


def _clean_plain_text(text: str) -> str:
  """Plain prose: lines stripped, spaces collapsed, empty lines dropped."""
  lines = (_SPACES.sub(" ", line).strip() for line in text.replace("\r", "\n").split("\n"))
  return "\n".join(line for line in lines if line)


class _ReadJsonlFn(beam.DoFn):
  """A JSONL file path -> `Document`s; bad lines go to the dead-letter output."""

  def __init__(self, max_page_bytes: int):
    super().__init__()
    self._max_page_bytes = max_page_bytes
    self._read = beam_runner.counter("documents_read")
    self._kept = beam_runner.counter("documents_kept")
    self._dead = beam_runner.counter("documents_dead_letter")

  def _parse(self, path: str, number: int, line: bytes) -> Iterable:
    if len(line) > self._max_page_bytes:
      raise ValueError(f"over-long document: {len(line)} bytes, more than --max_page_bytes")
    try:
      decoded = line.decode("utf-8")
    except UnicodeDecodeError as e:
      raise ValueError(f"invalid UTF-8 at byte {e.start} of the line") from e
    try:
      record = json.loads(decoded)
    except ValueError as e:
      raise ValueError(f"not JSON: {e}") from e
    if not isinstance(record, dict):
      raise ValueError("not a JSON object")
    title, text = record.get("title"), record.get("text")
    if not isinstance(title, str) or not title.strip():
      raise ValueError("no string field 'title'")
    if not isinstance(text, str):
      raise ValueError("no string field 'text'")
    for field, value in (("title", title), ("text", text)):
      surrogate = lone_surrogates.problem(value, f"'{field}'")
      if surrogate:
        raise ValueError(f"{surrogate}. {lone_surrogates.FIX}")
    text = _clean_plain_text(text)
    if not text:
      raise ValueError("empty document: no text")
    return [Document(title.strip(), text, path, number)]

  def process(self, path: str):
    with filesystems.FileSystems.open(path) as f:  # .gz / .bz2 decompressed by extension
      for number, line in enumerate(iter(f.readline, b""), start=1):
        if number == 1 and line.startswith(_UTF8_BOM):  # editors on Windows write one
          line = line[len(_UTF8_BOM):]
        if not line.strip():
          continue
        self._read.inc()
        try:
          documents = self._parse(path, number, line.rstrip(b"\r\n"))
        except ValueError as e:
          self._dead.inc()
          title = ""
          try:
            title = json.loads(line.decode("utf-8", "replace")).get("title", "")
          except (ValueError, AttributeError):
            pass
          yield dead_letter.tagged(path, number, title, "read_jsonl", str(e))
          continue
        self._kept.inc()
        yield from documents


class ReadJsonlDocuments(beam.PTransform):
  """JSONL files of `{"title": str, "text": str}` (plain prose) -> `Document`s.

  Returns {"documents": `Document`s, "dead_letter": dead-letter records}.

  Args:
    patterns: file patterns (any Beam filesystem; `.gz`/`.bz2` are decompressed).
    max_page_bytes: longer lines go to the dead-letter output.
  """

  def __init__(self, patterns: Sequence[str], max_page_bytes: int = 4 << 20):
    super().__init__()
    self.patterns = list(patterns)
    self.max_page_bytes = max_page_bytes

  def expand(self, pbegin):
    documents = (pbegin
                 | "Patterns" >> beam.Create(self.patterns)
                 | "Match" >> fileio.MatchAll()
                 | "Paths" >> beam.Map(lambda metadata: metadata.path)
                 | "SpreadFiles" >> beam.Reshuffle()
                 | "Read" >> beam.ParDo(_ReadJsonlFn(self.max_page_bytes)).with_outputs(
                     dead_letter.DEAD_LETTER, main="documents"))
    return {"documents": documents.documents | "SpreadDocuments" >> beam.Reshuffle(),
            dead_letter.DEAD_LETTER: documents[dead_letter.DEAD_LETTER]}


def read_documents(pbegin, input_patterns: List[str], input_format: str,
                   max_page_bytes: int, max_unparsed_fraction: float):
  """`ReadWikipediaDump` or `ReadJsonlDocuments` by `input_format` ("wikipedia" | "jsonl")."""
  if input_format == "wikipedia":
    return pbegin | "ReadWikipediaDump" >> ReadWikipediaDump(
        input_patterns, max_page_bytes, max_unparsed_fraction)
  if input_format == "jsonl":
    return pbegin | "ReadJsonlDocuments" >> ReadJsonlDocuments(input_patterns, max_page_bytes)
  raise ValueError(f"input_format must be 'wikipedia' or 'jsonl', got {input_format!r}")
