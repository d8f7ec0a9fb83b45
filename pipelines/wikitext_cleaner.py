"""Wikitext to clean prose with mwparserfromhell, and the page filters (disambiguation).

`clean_wikitext(text)`: the article's prose, one line per paragraph, whitespace collapsed
(`clean_wikitext_sections`: and where its lead and level-2 sections start). As WikiExtractor
and REALM/ORQA's blocks it keeps paragraph text, link text, formatting content, entities and a
few prose templates ({{lang|fr|text}}, {{convert|5|km}} -> "5 km"), and drops templates, refs,
tables, files, categories, comments, headings, lists and the no-prose sections ("See also", ...).

`<ref>`s are removed before parsing in one linear pass, since mwparserfromhell backtracks over
the rest of the page at every unclosed tag (quadratic time); as in MediaWiki a `<ref>` ends at
the first `</ref>`, and an unclosed one drops the rest of its line. Lines of local breakage the
parser leaves as text are dropped, as WikiExtractor does; when they exceed
`max_unparsed_fraction` of the page, or the parser fails, `MalformedWikitextError` (reason,
character offset) sends the page to the dead letters instead of indexing markup.
"""
import itertools
import re
from typing import List, Tuple

import mwparserfromhell
from mwparserfromhell import definitions
from mwparserfromhell import nodes

# Sections (level 2 headings, case-insensitive) whose content is references or links.
DROPPED_SECTIONS = frozenset({
    "see also", "references", "external links", "further reading", "notes", "bibliography",
    "sources", "citations", "footnotes", "notes and references", "references and notes",
    "works cited", "external links and references", "gallery", "selected bibliography",
    "primary sources", "secondary sources", "general references", "explanatory notes",
})
# Tags whose content is not prose.
_DROPPED_TAGS = frozenset({
    "ref", "references", "table", "gallery", "math", "chem", "ce", "score", "timeline",
    "imagemap", "syntaxhighlight", "source", "pre", "code", "templatedata", "graph",
    "categorytree", "inputbox", "mapframe", "maplink", "nowiki", "hiero", "poem", "noinclude",
    "includeonly", "onlyinclude", "section", "indicator", "div", "center", "caption", "tr",
    "td", "th"})
_LIST_MARKUP = frozenset({"*", "#", ";", ":"})
_LINE_BREAK_TAGS = frozenset({"br", "hr", "p"})
# Link namespaces that are not article text.
_DROPPED_LINK_PREFIXES = frozenset({
    "file", "image", "media", "category", "wikipedia", "wp", "template", "help", "portal",
    "special", "user", "talk", "wikt", "wiktionary", "commons", "s", "q", "n", "b", "v", "mw",
    "meta", "species", "wikisource", "wikiquote", "wikinews", "wikibooks", "wikiversity",
    "wikispecies", "wikidata", "d", "draft", "module", "mediawiki", "book", "timedtext"})
_INTERLANGUAGE = re.compile(r"^[a-z]{2,3}(-[a-z]{2,8})*$|^simple$")
# Inline templates whose text is prose: name -> which positional parameters to keep.
_TEXT_TEMPLATES = {
    "lang": (-1,), "nowrap": (0,), "nobr": (0,), "nobreak": (0,), "small": (0,),
    "smaller": (0,), "ill": (0,), "interlanguage link": (0,), "convert": (0, 1), "cvt": (0, 1),
    "sic": (-1,), "em": (0,), "strong": (0,), "transl": (-1,), "linktext": (0,),
    "math": (0,), "mvar": (0,), "ship": (0, 1), "visible anchor": (0,), "vanchor": (0,),
    "frac": (0, 1), "abbr": (0,), "keypress": (0,), "code": (0,), "not a typo": (0,),
}
_DISAMBIGUATION_TEMPLATE = re.compile(
    r"^(disambig(uation)?( .*)?|dab|disamb|disam|.*[ -]disambiguation( .*)?|"
    r"(hn|geo|number|school|math|letter-number ?comb)(dis|dab|disambig)|set index article|sia)$")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_REF_TAG_OR_COMMENT = re.compile(r"<!--|<(/?)ref(?=[\s/>])[^<>]*?(/?)\s*>", re.IGNORECASE)
_REF_CLOSE = re.compile(r"</ref\s*>", re.IGNORECASE)
# Openers and closers of what the parser matches over a distance: `{{` / `}}`, a table's
# `{|` / `|}` at a line start, an HTML tag (or a `<` that starts none), an external link's `[`.
_OPENER_OR_CLOSER = re.compile(
    r"(\{\{)|(\}\})|^[^\S\n]*(?:(\{\|)|(\|\}))|"
    r"<(/?)([A-Za-z][\w-]*)(?=[\s/>])[^<>]*?(/?)>|(<)(?=/?[A-Za-z])|"
    r"(\[)(?=https?:|ftp:|mailto:|//)", re.MULTILINE)
_UNMATCHED = "\x01"  # splits an unmatched opener: its line is then unparsed markup
_SECTION_MARK = "\x02"  # a rendered line of its own where a level 1 or 2 heading was
_LEFTOVER_MARKUP = re.compile(r"\{\{|\}\}|\[\[|\]\]|\{\||\|\}|\x01")
_EMPTY_BRACKETS = re.compile(r"\s*\((?:[\s,;:.\u2013\u2014-]|or|and)*\)")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?%])")
_SPACES = re.compile(r"[^\S\n]+")
_REPEATED_PUNCT = re.compile(r"([,;])(?:\s*[,;])+")


class MalformedWikitextError(ValueError):
  """Wikitext the parser could not turn into prose.

  Attributes:
    offset: character offset in the cleaned text (or the wikitext) where the problem is.
  """

  def __init__(self, reason: str, offset: int = -1):
    super().__init__(reason if offset < 0 else f"{reason} at character {offset}")
    self.offset = offset


def _normalized_name(name) -> str:
  return re.sub(r"[\s_]+", " ", str(name).strip().lower())


def is_disambiguation(title: str, wikitext: str) -> bool:
  """Whether the page is a disambiguation (or set-index / name-list) page.

  True when the title ends with "(disambiguation)" or the page uses a disambiguation template
  ({{disambiguation}}, {{disambig}}, {{dab}}, {{hndis}}, {{geodis}}, {{... disambiguation}},
  {{set index article}}, ...).
  """
  if title.rstrip().lower().endswith("(disambiguation)"):
    return True
  if "{{" not in wikitext:
    return False
  for match in re.finditer(r"\{\{\s*([^{}|\n]+?)\s*[|}]", wikitext):
    if _DISAMBIGUATION_TEMPLATE.match(_normalized_name(match.group(1))):
      return True
  return False


def _template_text(template: nodes.Template) -> str:
  name = _normalized_name(template.name)
  keep = _TEXT_TEMPLATES.get(name)
  if keep is None and name.startswith("lang-"):
    keep = (-1,)
  if keep is None:
    return ""
  positional = [p for p in template.params if not p.showkey]
  if not positional:
    return ""
  picked = []
  for i in keep:
    if -len(positional) <= i < len(positional):
      picked.append(_render(positional[i].value))
  return " ".join(part for part in picked if part.strip())


def _link_text(link: nodes.Wikilink) -> str:
  title = str(link.title).strip()
  if title.startswith(":"):  # [[:Category:X]] is a visible link
    title = title[1:]
  elif ":" in title:
    prefix = title.split(":", 1)[0].strip().lower()
    if prefix in _DROPPED_LINK_PREFIXES or _INTERLANGUAGE.match(prefix):
      return ""
  if link.text is not None:
    return _render(link.text)
  return title.split("#", 1)[0] if not title.startswith("#") else title[1:]


def _render(code) -> str:
  """Renders parsed wikitext as plain text, lines kept."""
  out = []
  for node in code.nodes:
    if isinstance(node, nodes.Text):
      out.append(str(node.value))
    elif isinstance(node, nodes.Wikilink):
      out.append(_link_text(node))
    elif isinstance(node, nodes.Tag):
      tag = _normalized_name(node.tag)
      if node.wiki_markup in _LIST_MARKUP:
        out.append("\n\x00")  # marks a list or indented line, dropped later
      elif tag in _LINE_BREAK_TAGS:
        out.append("\n" if tag != "br" else " ")
      elif tag not in _DROPPED_TAGS and node.contents is not None and not node.self_closing:
        out.append(_render(node.contents))
    elif isinstance(node, nodes.Template):
      out.append(_template_text(node))
    elif isinstance(node, nodes.ExternalLink):
      if node.brackets and node.title is not None:
        out.append(_render(node.title))
    elif isinstance(node, nodes.HTMLEntity):
      out.append(node.normalize())
    elif isinstance(node, nodes.Heading):
      out.append(f"\n{_SECTION_MARK}\n" if node.level <= 2 else "\n")
    # Comments, arguments ({{{x}}}) and anything else are not prose.
  return "".join(out)


def _drop_sections(code) -> None:
  """Removes the reference/link sections (heading and body) from parsed wikitext."""
  for section in code.get_sections(levels=[2]):
    headings = section.filter_headings(recursive=False)
    if headings and _normalized_name(headings[0].title.strip_code()) in DROPPED_SECTIONS:
      try:
        code.remove(section)
      except ValueError:
        pass


def _drop_refs(wikitext: str) -> str:
  """Removes `<ref>`s with their content, and what follows an unclosed `<!--`, in linear time
  (see the module docstring)."""
  last_close = max((match.start() for match in _REF_CLOSE.finditer(wikitext)), default=-1)
  pieces, kept_from = [], 0
  match = _REF_TAG_OR_COMMENT.search(wikitext)
  while match:
    if match.group(0) == "<!--":  # left to the parser
      resume = wikitext.find("-->", match.end())
      if resume < 0:  # an unclosed comment hides the rest of the page
        pieces.append(wikitext[kept_from:match.start()])
        kept_from = len(wikitext)
        break
    else:
      pieces.append(wikitext[kept_from:match.start()])
      if match.group(1) or match.group(2):  # a stray </ref>, or <ref ... />
        resume = match.end()
      elif match.start() < last_close:
        resume = _REF_CLOSE.search(wikitext, match.end()).end()
      else:  # unclosed: the rest of its line goes with it
        resume = wikitext.find("\n", match.end())
        resume = len(wikitext) if resume < 0 else resume
      kept_from = resume
    match = _REF_TAG_OR_COMMENT.search(wikitext, resume)
  pieces.append(wikitext[kept_from:])
  return "".join(pieces)


def _split_unmatched(wikitext: str) -> str:
  """Disarms every opener that nothing after it can close, in one linear scan.

  The parser retries such an opener (`{{`, `{|`, `<div>`, `<a` without `>`, `[http://...`
  without `]` on its line) against the rest of the page, each time: thousands of them made
  a 4 MB page take hours. Disarmed, the parser reads them as text, as it did after its
  retries: a `{{` or `{|` split by `_UNMATCHED` leaves its line unparsed markup (dropped); a
  tag's `<` or a link's `[` becomes its HTML entity, which renders as the same character.
  """
  braces, tables, tags, entities = [], [], {}, {}
  line_end, line_close = -1, -1  # the current line's end and its last `]`
  for match in _OPENER_OR_CLOSER.finditer(wikitext):
    if match.group(1):
      braces.append(match.start())
    elif match.group(2):
      if braces:
        braces.pop()
    elif match.group(3):
      tables.append(match.start(3))
    elif match.group(4):
      if tables:
        tables.pop()
    elif match.group(8):
      entities[match.start()] = "&lt;"
    elif match.group(9):
      if match.start() > line_end:
        line_end = wikitext.find("\n", match.start())
        line_end = len(wikitext) if line_end < 0 else line_end
        line_close = wikitext.rfind("]", match.start(), line_end)
      if line_close < match.start():
        entities[match.start()] = "&#91;"
    else:
      name = match.group(6).lower()
      if match.group(7) or definitions.is_single(name):
        continue
      if match.group(5):
        if tags.get(name):
          tags[name].pop()
      else:
        tags.setdefault(name, []).append(match.start())
  entities.update((start, "&lt;") for starts in tags.values() for start in starts)
  entities.update((start, wikitext[start] + _UNMATCHED + wikitext[start + 1] + _UNMATCHED)
                  for start in braces + tables)
  if not entities:
    return wikitext
  pieces, kept_from = [], 0
  for start in sorted(entities):
    pieces += [wikitext[kept_from:start], entities[start]]
    kept_from = start + (1 if entities[start][0] == "&" else 2)
  pieces.append(wikitext[kept_from:])
  return "".join(pieces)


def _paragraphs(text: str) -> Tuple[List[str], int, int, List[int]]:
  """Splits rendered text into clean paragraphs.

  Returns:
    (paragraphs, unparsed, first, section_firsts): lines holding markup the parser left
    unresolved (or template/table rows, "|..." / "!...") are dropped; `unparsed` counts their
    characters and `first` is the offset of the first such line in the rendered text (-1 if
    none); `section_firsts` are the indices of the paragraphs that follow a section mark.
  """
  paragraphs, unparsed, first, offset, section_firsts, in_new_section = [], 0, -1, 0, [], False
  for line in text.split("\n"):
    start, offset = offset, offset + len(line) + 1
    if line == _SECTION_MARK:
      in_new_section = True
      continue
    if line.startswith("\x00"):
      continue
    line = _SPACES.sub(" ", line)  # first: a long run of spaces made the patterns below quadratic
    stripped = line.strip()
    if _LEFTOVER_MARKUP.search(line) or stripped[:1] in ("|", "!"):
      unparsed += len(stripped)
      first = start if first < 0 else first
      continue
    line = _EMPTY_BRACKETS.sub("", line)
    line = _REPEATED_PUNCT.sub(r"\1", line)
    line = _SPACE_BEFORE_PUNCT.sub(r"\1", line)
    line = _SPACES.sub(" ", line).strip()
    if line and any(c.isalnum() for c in line):
      if in_new_section:
        section_firsts.append(len(paragraphs))
        in_new_section = False
      paragraphs.append(line)
  return paragraphs, unparsed, first, section_firsts


def clean_wikitext(wikitext: str, max_unparsed_fraction: float = 0.25) -> str:
  """The prose of an article's wikitext: paragraphs joined by "\\n" (`clean_wikitext_sections`'
  text)."""
  return clean_wikitext_sections(wikitext, max_unparsed_fraction)[0]


def clean_wikitext_sections(wikitext: str,
                            max_unparsed_fraction: float = 0.25) -> Tuple[str, Tuple[int, ...]]:
  """Returns the prose of an article's wikitext and where its sections start.

  Args:
    wikitext: the page's wikitext.
    max_unparsed_fraction: lines with markup the parser left unresolved are dropped; when
      they hold more than this fraction of the rendered text the page is malformed.

  Returns:
    (text, section_starts): clean text, paragraphs joined by "\\n" ("" when the page has no
    prose); the ascending character offsets in it of the first paragraph of the lead (0) and
    of each section (a level 1 or 2 heading's) that kept prose; () for an empty text. A
    section starts at a paragraph start; subsections (level 3+) belong to their section.

  Raises:
    MalformedWikitextError: the parser failed, or more than `max_unparsed_fraction` of the
      text is markup it could not resolve (unbalanced `{{`, `[[`, `{|`).
  """
  try:
    code = mwparserfromhell.parse(_split_unmatched(_drop_refs(_MAGIC_WORD.sub("", wikitext))))
    _drop_sections(code)
    text = _render(code)
  except Exception as e:  # pylint: disable=broad-except  (any input, a third-party parser)
    raise MalformedWikitextError(f"wikitext parser failed: {type(e).__name__}: {e}") from e
  text = text.replace("\r", "")
  paragraphs, unparsed, first, section_firsts = _paragraphs(text)
  kept = sum(len(p) for p in paragraphs)
  if unparsed and unparsed > max_unparsed_fraction * (kept + unparsed):
    raise MalformedWikitextError(
        f"{unparsed} of {kept + unparsed} characters are markup the parser could not resolve "
        f"(unbalanced {{{{, [[ or {{|), starting {text[first:first + 60]!r}", first)
  if not paragraphs:
    return "", ()
  starts = list(itertools.accumulate((len(p) + 1 for p in paragraphs), initial=0))
  return "\n".join(paragraphs), (0,) + tuple(starts[i] for i in section_firsts if i)
