"""Streams the pages of a MediaWiki XML dump (`.xml`, `.xml.bz2`, `.xml.gz`), never whole.

The dump is decompressed and parsed with expat in `chunk_bytes` pieces, so memory is one chunk
plus the page being read whatever the dump's size (full English Wikipedia: ~90 GB of XML);
multistream `.bz2` dumps are read as one stream. A `Page`'s offset is the byte offset of its
`<page>` tag in the decompressed XML.

One bad byte never costs a dump: invalid UTF-8 is decoded to U+FDD0, and a reference to a
character XML forbids (`&#xD800;`, `&#1;`), which would stop expat for the rest of the file, is
read as U+FDD1 (the page reports `invalid_utf8_bytes` / `invalid_char_refs` and is
dead-lettered; a short one shifts later offsets by a few bytes); a page over `max_page_bytes`
stops accumulating text (`over_long`); a dump that ends early yields every complete page, then
raises `DumpTruncatedError` saying where it broke (byte offset, line, last complete page).
"""
import bz2
import codecs
import dataclasses
import gzip
import re
from typing import BinaryIO, Iterator, List, Optional
import xml.parsers.expat

INVALID_UTF8_CHAR = "\ufdd0"
INVALID_CHAR_REF_CHAR = "\ufdd1"
_INVALID_UTF8_ERRORS = "realm_tf_invalid_utf8"
DEFAULT_CHUNK_BYTES = 1 << 20
DEFAULT_MAX_PAGE_BYTES = 4 << 20
_CHAR_REF = re.compile(r"&#(?:x([0-9A-Fa-f]+)|([0-9]+));")
_PARTIAL_CHAR_REF = re.compile(r"&(?:#(?:x[0-9A-Fa-f]*|[0-9]*))?")


def _mark_invalid_utf8(error: UnicodeDecodeError):
  return INVALID_UTF8_CHAR * (error.end - error.start), error.end


codecs.register_error(_INVALID_UTF8_ERRORS, _mark_invalid_utf8)


def _is_xml_char(code: int) -> bool:
  return (code in (0x9, 0xA, 0xD) or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or
          0x10000 <= code <= 0x10FFFF)


def _mark_invalid_char_ref(match: re.Match) -> str:
  """A reference to a character XML forbids -> a reference to U+FDD1 of the same length when
  it fits (byte offsets stay exact), else U+FDD1 itself; valid references are kept."""
  digits = (match.group(1) or match.group(2)).lstrip("0") or "0"
  if len(digits) <= 8 and _is_xml_char(int(digits, 16 if match.group(1) else 10)):
    return match.group(0)
  width = len(match.group(0)) - 4  # "&#x" + digits + ";"
  return f"&#x{'FDD1'.rjust(width, '0')};" if width >= 4 else INVALID_CHAR_REF_CHAR


def _mark_invalid_char_refs(text: str) -> str:
  return _CHAR_REF.sub(_mark_invalid_char_ref, text) if "&#" in text else text


@dataclasses.dataclass
class Page:
  """One `<page>` of the dump (the latest revision's text).

  Attributes:
    title: page title.
    namespace: the `<ns>` number (0 = main/article namespace).
    page_id: the `<id>` of the page (-1 if absent).
    redirect: the redirect target, or None for a real page.
    text: the revision's wikitext ("" if absent); cut at `max_page_bytes` when over-long.
    offset: byte offset of `<page>` in the decompressed dump.
    line: 1-based line of `<page>` in the dump.
    text_bytes: UTF-8 size of the whole wikitext, also when it was cut.
    invalid_utf8_bytes: invalid UTF-8 bytes found in the page (each read as U+FDD0).
    invalid_char_refs: references to characters XML forbids in the page's title and text (each
      read as U+FDD1).
    over_long: the text exceeded `max_page_bytes` and was cut.
    source: the dump file the page comes from ("" if not known).
  """
  title: str
  namespace: int
  page_id: int
  redirect: Optional[str]
  text: str
  offset: int
  line: int
  text_bytes: int = 0
  invalid_utf8_bytes: int = 0
  invalid_char_refs: int = 0
  over_long: bool = False
  source: str = ""


class DumpTruncatedError(Exception):
  """The dump ended before `</mediawiki>`; every complete page before the break was yielded.

  Attributes:
    offset: decompressed bytes read before the break.
    line: the XML line the parser had reached.
    pages_read: complete pages yielded before the break.
    last_title: title of the last complete page ("" if none).
    reason: what broke (decompressor or XML parser message).
  """

  def __init__(self, offset: int, line: int, pages_read: int, last_title: str, reason: str):
    super().__init__(f"dump truncated at decompressed byte {offset} (line {line}) after "
                     f"{pages_read} complete pages (last: {last_title!r}): {reason}")
    self.offset = offset
    self.line = line
    self.pages_read = pages_read
    self.last_title = last_title
    self.reason = reason


def open_decompressed(raw: BinaryIO, name: str) -> BinaryIO:
  """Wraps a raw byte stream in the decompressor its file name asks for (`.bz2`, `.gz`)."""
  if name.endswith(".bz2"):
    return bz2.BZ2File(raw, "rb")
  if name.endswith(".gz"):
    return gzip.GzipFile(fileobj=raw, mode="rb")
  return raw


class _PageHandler:
  """expat callbacks that assemble `Page`s; finished pages wait in `pages`."""

  # Element paths (below <page>) whose text is kept; with several revisions the last wins.
  _FIELDS = {("title",): "title", ("ns",): "ns", ("id",): "id", ("revision", "text"): "text"}

  def __init__(self, parser, max_page_bytes: int):
    self._parser = parser
    self._max_page_bytes = max_page_bytes
    self.pages: List[Page] = []
    self._path: List[str] = []
    self._page_depth = -1
    self._page: Optional[dict] = None
    self._field: Optional[str] = None
    self._chunks: List[str] = []
    self._text_bytes = 0

  def start(self, name, attrs):
    name = name.rsplit(" ", 1)[-1]  # drop the namespace URI (namespace_separator=" ")
    self._path.append(name)
    if name == "page" and self._page is None:
      self._page_depth = len(self._path)
      self._page = {"offset": self._parser.CurrentByteIndex,
                    "line": self._parser.CurrentLineNumber, "redirect": None, "id": None,
                    "text": "", "ns": "0", "title": "", "text_bytes": 0, "over_long": False}
    elif self._page is not None:
      relative = tuple(self._path[self._page_depth:])
      if relative == ("redirect",):
        self._page["redirect"] = attrs.get("title", "")
      elif relative in self._FIELDS:
        self._field = self._FIELDS[relative]
        self._chunks = []
        self._text_bytes = 0
        self._page["over_long"] = False if self._field == "text" else self._page["over_long"]

  def chars(self, data):
    if self._field is None:
      return
    if self._field == "text":
      self._text_bytes += len(data.encode("utf-8"))
      if self._text_bytes > self._max_page_bytes:
        self._page["over_long"] = True
        return
    self._chunks.append(data)

  def end(self, name):
    name = name.rsplit(" ", 1)[-1]
    depth = len(self._path)
    self._path.pop()
    if self._page is None:
      return
    if self._field is not None:
      self._page[self._field] = "".join(self._chunks)
      if self._field == "text":
        self._page["text_bytes"] = self._text_bytes
      self._field = None
      self._chunks = []
    if name == "page" and depth == self._page_depth:
      page, self._page = self._page, None
      self.pages.append(Page(
          title=page["title"], namespace=_to_int(page["ns"]), page_id=_to_int(page["id"]),
          redirect=page["redirect"], text=page["text"], offset=page["offset"],
          line=page["line"], text_bytes=page["text_bytes"],
          invalid_utf8_bytes=(page["text"].count(INVALID_UTF8_CHAR) +
                              page["title"].count(INVALID_UTF8_CHAR)),
          invalid_char_refs=(page["text"].count(INVALID_CHAR_REF_CHAR) +
                             page["title"].count(INVALID_CHAR_REF_CHAR)),
          over_long=page["over_long"]))


def _to_int(value: Optional[str]) -> int:
  try:
    return int(value)
  except (TypeError, ValueError):
    return -1


def iter_pages(stream: BinaryIO, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
               max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES) -> Iterator[Page]:
  """Yields the pages of a decompressed MediaWiki XML byte stream, in dump order.

  Args:
    stream: a binary stream of XML (see `open_decompressed`).
    chunk_bytes: bytes decompressed and parsed per step.
    max_page_bytes: wikitext bytes kept per page; longer pages come with `over_long=True`.

  Yields:
    `Page`s.

  Raises:
    DumpTruncatedError: the stream ended, or stopped decompressing or parsing, before the end
      of the dump; raised after the last complete page was yielded.
  """
  parser = xml.parsers.expat.ParserCreate(encoding="UTF-8", namespace_separator=" ")
  parser.buffer_text = True
  parser.buffer_size = 1 << 16
  handler = _PageHandler(parser, max_page_bytes)
  parser.StartElementHandler = handler.start
  parser.EndElementHandler = handler.end
  parser.CharacterDataHandler = handler.chars
  decoder = codecs.getincrementaldecoder("utf-8")(errors=_INVALID_UTF8_ERRORS)
  # read1: one decompression step at a time, so bytes decoded before a break are not lost.
  read = getattr(stream, "read1", stream.read)
  consumed = 0
  pages_read = 0
  last_title = ""
  held = ""  # the end of the last chunk that may be the start of a character reference

  def flush():
    nonlocal pages_read, last_title
    for page in handler.pages:
      pages_read += 1
      last_title = page.title
      yield page
    handler.pages.clear()

  def truncated(reason: str) -> DumpTruncatedError:
    return DumpTruncatedError(consumed, parser.CurrentLineNumber, pages_read, last_title,
                              reason)

  while True:
    try:
      data = read(chunk_bytes)
    except (EOFError, OSError, ValueError) as e:  # cut bz2/gzip streams, corrupt blocks
      yield from flush()
      raise truncated(f"{type(e).__name__}: {e}") from e
    final = not data
    consumed += len(data)
    text, held = held + decoder.decode(data, final), ""
    start = text.rfind("&")
    if not final and start >= 0 and _PARTIAL_CHAR_REF.fullmatch(text, start):
      text, held = text[:start], text[start:]
    try:
      # For expat: re-encoding makes the bytes valid UTF-8 (bad bytes became U+FDD0), and
      # references to characters XML forbids now name U+FDD1.
      parser.Parse(_mark_invalid_char_refs(text).encode("utf-8"), final)
    except xml.parsers.expat.ExpatError as e:
      yield from flush()
      raise truncated(f"XML error: {xml.parsers.expat.ErrorString(e.code)} at line "
                      f"{e.lineno}, column {e.offset}") from e
    yield from flush()
    if final:
      return


def iter_dump_file(path: str, raw: BinaryIO, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                   max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES) -> Iterator[Page]:
  """`iter_pages` over the raw (possibly compressed) bytes of dump file `path`; the pages'
  `source` is `path`."""
  for page in iter_pages(open_decompressed(raw, path), chunk_bytes, max_page_bytes):
    page.source = path
    yield page
