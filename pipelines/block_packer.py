"""Packs an article's sentences greedily into REALM evidence blocks.

A block is `[CLS] title [SEP] body [SEP]` with at most `block_length` (288) wordpieces: the
title first, then whole sentences in order while they fit; a sentence longer than the body
budget alone is cut at word starts into pieces that fit. Blocks never span articles, nor, by
`boundaries`, a paragraph ("\\n"; a block holds one paragraph or a piece of a long one, the
patent's "a paragraph is a document") or a section (the lead or a level-2 heading's). S
sentences of a batch of articles, T wordpieces.

Invariants (tested): every block fits; a block's `text` is a slice of the cleaned article and
its `body_ids` are exactly the wordpieces of that text; an article's blocks cover each of its
non-whitespace characters once, in order. Block ids are content hashes, stable across runs and
runners: the first 8 bytes of sha256(title + "\\n" + text), big-endian, masked to 63 bits.
"""
import bisect
import dataclasses
import hashlib
import re
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.tokenization import sentence_splitter
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

_NUM_SPECIALS = 3  # [CLS], [SEP], [SEP]
_ID_MASK = (1 << 63) - 1
# Where blocks must break besides articles: nowhere more, at each paragraph, at each section.
BLOCK_BOUNDARIES = ("greedy", "paragraph", "section")


def block_id(title: str, text: str) -> int:
  """The 63-bit content hash of a block: int in [0, 2**63)."""
  digest = hashlib.sha256(f"{title}\n{text}".encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") & _ID_MASK


@dataclasses.dataclass
class Block:
  """One evidence block, as in `realm_tf.data.formats.block_example`.

  Attributes:
    block_id: `block_id(title, text)`.
    title: the article title.
    text: the body text (whole sentences, or the pieces of one over-long sentence).
    title_ids: int64 [T_title] title wordpieces, no specials.
    body_ids: int64 [T_body] body wordpieces, no specials; T_title + T_body + 3 <= L.
    start, end: character span of `text` in the cleaned article.
  """
  block_id: int
  title: str
  text: str
  title_ids: np.ndarray
  body_ids: np.ndarray
  start: int
  end: int


def check_lengths(block_length: int, max_title_wordpieces: int) -> None:
  """Raises InputError naming the flags if a title of `max_title_wordpieces` and the three
  specials leave no wordpiece of a `block_length` block for the body."""
  if max_title_wordpieces + _NUM_SPECIALS >= block_length:
    raise errors.InputError(errors.describe(
        f"--block_length={block_length}", f"leaves no room for a body after a title of up to "
        f"--max_title_wordpieces={max_title_wordpieces} wordpieces and [CLS], [SEP], [SEP]",
        f"Pass --block_length above {max_title_wordpieces + _NUM_SPECIALS} (REALM: "
        f"{BLOCK_LENGTH}), or a --max_title_wordpieces below {block_length - _NUM_SPECIALS}"))


def check_boundaries(boundaries: str) -> None:
  """Raises InputError naming the flag if `boundaries` is not one of `BLOCK_BOUNDARIES`."""
  if boundaries not in BLOCK_BOUNDARIES:
    raise errors.InputError(errors.describe(
        f"--block_boundaries={boundaries}", "unknown block boundaries",
        f"Pass one of {', '.join(BLOCK_BOUNDARIES)}"))


class BlockPackingError(ValueError):
  """An article that cannot be packed (its title alone leaves no room for a body)."""


def _ragged_rows(ragged: tf.RaggedTensor) -> List[np.ndarray]:
  values, splits = ragged.flat_values.numpy(), ragged.row_splits.numpy()
  return [values[splits[i]:splits[i + 1]] for i in range(len(splits) - 1)]


class BlockPacker:
  """Splits, tokenizes and packs articles into blocks.

  Args:
    tokenizer: the `WordpieceTokenizer` of the retriever's vocabulary.
    block_length: L, the packed block length including `[CLS]`, `[SEP]`, `[SEP]`.
    max_title_wordpieces: longer titles make the article fail with `BlockPackingError`.
    boundaries: one of `BLOCK_BOUNDARIES`: "greedy" packs sentences across paragraphs and
      sections; "paragraph" starts a block at every paragraph (so a block never holds two);
      "section" at every section start, packing each section greedily.
  """

  def __init__(self, tokenizer: WordpieceTokenizer, block_length: int = BLOCK_LENGTH,
               max_title_wordpieces: int = 64, boundaries: str = "greedy"):
    check_lengths(block_length, max_title_wordpieces)
    check_boundaries(boundaries)
    self.tokenizer = tokenizer
    self.block_length = int(block_length)
    self.max_title_wordpieces = int(max_title_wordpieces)
    self.boundaries = boundaries
    # is_word_start[id]: the wordpiece starts a word (is not a "##" continuation).
    self._is_word_start = np.array([not t.startswith("##") for t in tokenizer.vocabulary])

  def pack(self, documents: Sequence[Tuple[str, str]],
           section_starts: Optional[Sequence[Sequence[int]]] = None) -> List[List[Block]]:
    """Packs a batch of articles with one tokenizer call.

    Args:
      documents: (title, clean text) pairs; paragraphs of the text are separated by "\\n".
      section_starts: per article, the ascending offsets of paragraph starts in its text where
        a section starts (`document_sources.Document.section_starts`; (): one section); None:
        every article is one section. Read only with `boundaries="section"`.

    Returns:
      the blocks of each article, in article order ([] for an article without wordpieces).

    Raises:
      BlockPackingError: a title has more than `max_title_wordpieces` wordpieces (raised for
        the first such article; pack articles one at a time to isolate it).
    """
    strings = []  # S strings: each title, then its sentences
    sentence_spans = []
    for title, text in documents:
      spans = sentence_splitter.split_sentences(text)
      sentence_spans.append(spans)
      strings.append(title)
      strings.extend(text[start:end] for start, end in spans)
    ids, starts, _ = self.tokenizer.tokenize_with_offsets(tf.constant(strings))
    ids, starts = _ragged_rows(ids), _ragged_rows(starts)  # S x [T]
    results, row = [], 0
    for i, ((title, text), spans) in enumerate(zip(documents, sentence_spans)):
      title_ids = ids[row].astype(np.int64)
      sentences = [(text[s:e], s, ids[row + 1 + j].astype(np.int64), starts[row + 1 + j])
                   for j, (s, e) in enumerate(spans)]
      row += 1 + len(spans)
      breaks = self._breaks(text, section_starts[i] if section_starts else ())
      results.append(self._pack_article(title, text, title_ids, sentences, breaks))
    return results

  def _breaks(self, text: str, section_starts: Sequence[int]) -> List[int]:
    """The ascending character offsets where a block must start, by `boundaries`."""
    if self.boundaries == "paragraph":
      return [match.end() for match in re.finditer("\n", text)]
    if self.boundaries == "section":
      return list(section_starts)
    return []

  def _pack_article(self, title: str, text: str, title_ids: np.ndarray, sentences,
                    breaks: List[int]) -> List[Block]:
    if len(title_ids) > self.max_title_wordpieces:
      raise BlockPackingError(f"title {title!r} has {len(title_ids)} wordpieces, more than "
                              f"max_title_wordpieces={self.max_title_wordpieces}")
    budget = self.block_length - _NUM_SPECIALS - len(title_ids)
    units = []  # (start, end, ids): sentences, or pieces of over-long ones
    for sentence, offset, sentence_ids, byte_starts in sentences:
      if len(sentence_ids) <= budget:
        units.append((offset, offset + len(sentence), sentence_ids))
      else:
        units.extend(self._split_sentence(sentence, offset, sentence_ids, byte_starts, budget))
    blocks, current, size, part = [], [], 0, 0  # part: the paragraph or section, by `breaks`
    for unit in units:  # no sentence crosses a line, so each unit lies in one part
      unit_part = bisect.bisect_right(breaks, unit[0])
      if current and (size + len(unit[2]) > budget or unit_part != part):
        blocks.append(self._block(title, text, title_ids, current))
        current, size = [], 0
      current.append(unit)
      size += len(unit[2])
      part = unit_part
    if current:
      blocks.append(self._block(title, text, title_ids, current))
    return [b for b in blocks if len(b.body_ids)]

  def _split_sentence(self, sentence: str, offset: int, ids: np.ndarray,
                      byte_starts: np.ndarray, budget: int):
    """Cuts an over-long sentence at word starts into pieces of <= budget wordpieces."""
    encoded = sentence.encode("utf-8")
    word_start = self._is_word_start[ids]
    cuts, first = [], 0
    while len(ids) - first > budget:
      cut = first + budget
      candidates = np.nonzero(word_start[first + 1:cut + 1])[0]
      if candidates.size:  # the last word start that keeps the piece within budget
        cut = first + 1 + int(candidates[-1])
      cuts.append(cut)
      first = cut
    bounds, char, byte = [0], 0, 0
    for c in cuts:  # byte offsets -> character offsets, decoding each stretch once
      target = int(byte_starts[c])
      char += len(encoded[byte:target].decode("utf-8"))
      byte = target
      bounds.append(char)
    bounds.append(len(sentence))
    token_bounds = [0] + cuts + [len(ids)]
    pieces = []
    for i in range(len(bounds) - 1):
      start, end = bounds[i], bounds[i + 1]
      end = start + len(sentence[start:end].rstrip())
      pieces.append((offset + start, offset + end, ids[token_bounds[i]:token_bounds[i + 1]]))
    return pieces

  def _block(self, title: str, text: str, title_ids: np.ndarray, units) -> Block:
    start, end = units[0][0], units[-1][1]
    body = text[start:end]
    body_ids = np.concatenate([u[2] for u in units]) if units else np.zeros([0], np.int64)
    return Block(block_id(title, body), title, body, title_ids, body_ids, start, end)
