"""MediaWiki XML dump text for tests: `page_xml(...)` pages joined by `dump_xml(...)`; and a real
dump, gensim's test data (`real_dump_path`; `make install` installs it, and a test that needs
it fails without it, naming the fix)."""
import importlib.util
import os
from xml.sax import saxutils

import pytest


GENSIM_DUMP = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def real_dump_path() -> str:
  """gensim 4.4.0's 107-article English Wikipedia dump (`pip install --no-deps gensim==4.4.0`)."""
  spec = importlib.util.find_spec("gensim")
  if spec is None:
    pytest.fail("the gensim==4.4.0 data package is not installed: run `make install` "
                "(it installs gensim==4.4.0 with --no-deps for its real Wikipedia dump)")
  path = os.path.join(spec.submodule_search_locations[0], "test", "test_data", GENSIM_DUMP)
  if not os.path.exists(path):
    pytest.fail(f"{GENSIM_DUMP} is not in the installed gensim: run `make install` "
                "(gensim==4.4.0 carries it)")
  return path


def page_xml(title, text, ns=0, page_id=1, redirect=None):
  """One dump `<page>`; the wikitext is XML-escaped as in real dumps."""
  text = saxutils.escape(text)
  redirect = f'<redirect title="{redirect}" />' if redirect else ""
  return (f"  <page>\n    <title>{title}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>\n"
          f"    {redirect}\n    <revision>\n      <id>{page_id + 1000}</id>\n"
          f"      <contributor><id>7</id></contributor>\n"
          f'      <text xml:space="preserve">{text}</text>\n    </revision>\n  </page>\n')


def dump_xml(*pages):
  """The bytes of a dump holding `pages`."""
  return ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10">\n'
          "  <siteinfo><sitename>Wikipedia</sitename></siteinfo>\n" + "".join(pages) +
          "</mediawiki>\n").encode("utf-8")
