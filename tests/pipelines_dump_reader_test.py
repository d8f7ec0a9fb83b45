"""Tests for pipelines.dump_reader: streaming pages out of MediaWiki XML, robust to bad input."""
import bz2
import io

import apache_beam as beam
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import pytest

from pipelines import dead_letter
from pipelines import document_sources
from pipelines import dump_reader
from wiki_dump_xml import dump_xml
from wiki_dump_xml import page_xml
from wiki_dump_xml import real_dump_path

def read_all(data: bytes, **kwargs):
  return list(dump_reader.iter_pages(io.BytesIO(data), **kwargs))


def test_pages_fields_and_offsets():
  data = dump_xml(page_xml("Paris", "'''Paris''' is the capital & <b>largest</b> city.",
                           page_id=5),
                  page_xml("Talk:Paris", "chat", ns=1, page_id=6),
                  page_xml("Lutetia", "#REDIRECT [[Paris]]", page_id=7, redirect="Paris"))
  pages = read_all(data, chunk_bytes=37)  # tiny chunks: elements span feeds
  assert [(p.title, p.namespace, p.page_id, p.redirect) for p in pages] == [
      ("Paris", 0, 5, None), ("Talk:Paris", 1, 6, None), ("Lutetia", 0, 7, "Paris")]
  assert pages[0].text == "'''Paris''' is the capital & <b>largest</b> city."
  assert b"&amp; &lt;b&gt;largest" in data  # escaped in the XML, as in real dumps
  for page in pages:
    assert data[page.offset:].startswith(b"<page>")
    assert data.decode().splitlines()[page.line - 1].strip() == "<page>"
  assert pages[0].text_bytes == len(pages[0].text.encode())
  assert not any(p.over_long or p.invalid_utf8_bytes for p in pages)


def test_truncated_xml_yields_every_complete_page_then_reports_where():
  data = dump_xml(*(page_xml(f"Page {i}", f"Text number {i}.", page_id=i) for i in range(5)))
  cut = data.index(b"Text number 3") + 5  # inside page 3
  pages = []
  with pytest.raises(dump_reader.DumpTruncatedError) as error:
    for page in dump_reader.iter_pages(io.BytesIO(data[:cut]), chunk_bytes=64):
      pages.append(page)
  assert [p.title for p in pages] == ["Page 0", "Page 1", "Page 2"]
  assert error.value.pages_read == 3 and error.value.last_title == "Page 2"
  assert error.value.offset == cut
  assert "XML error" in error.value.reason and "Page 2" in str(error.value)


def test_truncated_real_bz2_dump_yields_every_decompressible_page():
  path = real_dump_path()
  with open(path, "rb") as f:
    data = f.read()
  full = [p.title for p in dump_reader.iter_dump_file(path, io.BytesIO(data))]
  assert len(full) == 206
  cut = data[:len(data) // 2]
  recoverable = bz2.BZ2Decompressor().decompress(cut)  # what any reader could get back
  pages = []
  with pytest.raises(dump_reader.DumpTruncatedError) as error:
    for page in dump_reader.iter_dump_file(path, io.BytesIO(cut)):
      pages.append(page.title)
  assert pages == full[:recoverable.count(b"</page>")]
  assert len(pages) > 90
  assert error.value.offset == len(recoverable) and "EOFError" in error.value.reason
  assert error.value.last_title == pages[-1]


def test_multistream_bz2_is_read_whole():
  first = dump_xml(page_xml("A", "one"))
  head, tail = first[:len(first) // 2], first[len(first) // 2:]
  stream = io.BytesIO(bz2.compress(head) + bz2.compress(tail))
  pages = list(dump_reader.iter_dump_file("x.xml.bz2", stream))
  assert [p.title for p in pages] == ["A"]


def test_invalid_utf8_is_marked_and_later_pages_survive():
  data = dump_xml(page_xml("Bad", "caf\u00e9 PLACEHOLDER end", page_id=1),
                  page_xml("Good", "fine text", page_id=2))
  data = data.replace(b"PLACEHOLDER", b"\xff\xfe")
  pages = read_all(data)
  assert [p.title for p in pages] == ["Bad", "Good"]
  assert pages[0].invalid_utf8_bytes == 2
  assert dump_reader.INVALID_UTF8_CHAR * 2 in pages[0].text
  assert pages[1].invalid_utf8_bytes == 0 and pages[1].text == "fine text"


def test_over_long_page_is_flagged_and_not_kept_whole():
  data = dump_xml(page_xml("Huge", "x" * 5000, page_id=1), page_xml("Small", "y", page_id=2))
  pages = read_all(data, chunk_bytes=512, max_page_bytes=1000)
  assert pages[0].over_long and pages[0].text_bytes == 5000 and len(pages[0].text) <= 1000
  assert not pages[1].over_long and pages[1].text == "y"


def test_several_revisions_keep_the_last_text():
  page = page_xml("P", "old").replace(
      "    </revision>\n", "    </revision>\n    <revision><text>new</text></revision>\n")
  assert read_all(dump_xml(page))[0].text == "new"


def _dump_with_invalid_char_refs():
  """Raw (unescaped) character references as XML writes them: two to characters XML forbids
  in a title and a text, valid ones that stay, and a short forbidden one in the last page."""
  data = dump_xml(page_xml("Before", "Fine prose.", page_id=1),
                  page_xml("Bad TITLEREF", "Prose here.", page_id=2),
                  page_xml("Bad text", "x TEXTREF y DECREF z", page_id=3),
                  page_xml("After", "Fine HEXA and DECA prose.", page_id=4),
                  page_xml("Short", "Prose SHORTREF.", page_id=5))
  for placeholder, ref in ((b"TITLEREF", b"&#xD800;"), (b"TEXTREF", b"&#xFFFE;"),
                           (b"DECREF", b"&#0055296;"), (b"HEXA", b"&#x41;"), (b"DECA", b"&#66;"),
                           (b"SHORTREF", b"&#1;")):
    data = data.replace(placeholder, ref)
  return data


@pytest.mark.parametrize("chunk_bytes", [3, 7, 1 << 20])  # references split across chunks
def test_invalid_character_references_mark_their_page_and_later_pages_survive(chunk_bytes):
  data = _dump_with_invalid_char_refs()
  pages = read_all(data, chunk_bytes=chunk_bytes)
  marker = dump_reader.INVALID_CHAR_REF_CHAR
  assert [(p.title, p.invalid_char_refs) for p in pages] == [
      ("Before", 0), (f"Bad {marker}", 1), ("Bad text", 2), ("After", 0), ("Short", 1)]
  assert pages[2].text == f"x {marker} y {marker} z"
  assert pages[3].text == "Fine A and B prose."
  assert pages[4].text == f"Prose {marker}."
  for page in pages:  # same-length replacements: offsets stay exact
    assert data[page.offset:].startswith(b"<page>")
  assert not any(p.invalid_utf8_bytes for p in pages)


def test_a_page_with_an_invalid_character_reference_is_dead_lettered_alone(tmp_path):
  path = tmp_path / "refs.xml"
  path.write_bytes(_dump_with_invalid_char_refs())
  with test_pipeline.TestPipeline() as p:
    out = p | document_sources.ReadWikipediaDump([str(path)])
    assert_that(out["documents"] | beam.Map(lambda d: (d.title, d.text)), equal_to([
        ("Before", "Fine prose."), ("After", "Fine A and B prose.")]), label="documents")
    assert_that(out[dead_letter.DEAD_LETTER] | beam.Map(
        lambda r: (r["source"], r["title"], r["stage"], r["reason"])), equal_to([
            (str(path), f"Bad {dump_reader.INVALID_CHAR_REF_CHAR}", "clean_page",
             "invalid character references: 1 to characters XML forbids (e.g. &#xD800;, "
             "&#xFFFE;) in the title or text"),
            (str(path), "Bad text", "clean_page",
             "invalid character references: 2 to characters XML forbids (e.g. &#xD800;, "
             "&#xFFFE;) in the title or text"),
            (str(path), "Short", "clean_page",
             "invalid character references: 1 to characters XML forbids (e.g. &#xD800;, "
             "&#xFFFE;) in the title or text")]), label="dead")
