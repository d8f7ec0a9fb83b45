"""MediaWiki XML dump text for tests: `page_xml(...)` pages joined by `dump_xml(...)`."""
from xml.sax import saxutils


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
