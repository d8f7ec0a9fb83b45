"""Tests for pipeline 1's `--block_boundaries`: greedy, paragraph and section blocks, from the
wikitext cleaner's section starts to the packed blocks, on hand-written articles and on a few
articles of a real dump.

Legend: L block length.
"""
import json
import re

import apache_beam as beam
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import pytest
import tensorflow as tf

from pipelines import block_packer
from pipelines import document_sources
from pipelines import dump_reader
from pipelines import wikipedia_to_blocks_lib
from pipelines import wikitext_cleaner
from realm_tf import errors
from realm_tf import pretrained
from realm_tf.tokenization import WordpieceTokenizer
from wiki_dump_xml import dump_xml
from wiki_dump_xml import page_xml
from wiki_dump_xml import real_dump_path

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ".",
         "dog", "ran", "##s", "a", "big", "paris", "is", "in", "france", ","]
# A lead, a section with a subsection, a dropped section, an empty one and a last section.
PAGE = ("{{Infobox city|name=Paris}}\n'''Paris''' is in [[France]]. The cat sat.\n"
        "== History ==\nThe dog ran.\n=== Old ===\nA big dog.\n== References ==\n{{reflist}}\n"
        "== Empty ==\n{{stub}}\n== Cats ==\nThe cat sat on the mat.\n")
TEXT = "Paris is in France. The cat sat.\nThe dog ran.\nA big dog.\nThe cat sat on the mat."
SECTIONS = (0, TEXT.index("The dog"), TEXT.index("The cat sat on"))
# With L = 12 and a one-wordpiece title (8 for the body): the blocks of TEXT by mode, and of
# the same text from JSONL (no headings: one section).
EXPECTED = {
    "greedy": ["Paris is in France.", "The cat sat.\nThe dog ran.", "A big dog.",
               "The cat sat on the mat."],
    "paragraph": ["Paris is in France.", "The cat sat.", "The dog ran.", "A big dog.",
                  "The cat sat on the mat."],
    "section": ["Paris is in France.", "The cat sat.", "The dog ran.\nA big dog.",
                "The cat sat on the mat."]}
EXPECTED_JSONL = dict(EXPECTED, section=EXPECTED["greedy"])


def breaks(text, mode, section_starts):
  """Where `mode`'s blocks must not cross: line starts, or section starts."""
  if mode == "paragraph":
    return [m.end() for m in re.finditer("\n", text)]
  return list(section_starts) if mode == "section" else []


def check_blocks(tokenizer, block_length, text, blocks, forbidden):
  """The packer's invariants, and that no block crosses an offset of `forbidden`."""
  squash = lambda s: re.sub(r"\s", "", s)
  assert squash("".join(b.text for b in blocks)) == squash(text)  # each character once
  assert [b.start for b in blocks] == sorted(b.start for b in blocks)
  retokenized = tokenizer(tf.constant([b.text for b in blocks])).to_list()  # one call
  for block, body_ids in zip(blocks, retokenized):
    assert text[block.start:block.end] == block.text
    assert len(block.title_ids) + len(block.body_ids) + 3 <= block_length
    assert block.body_ids.tolist() == body_ids
    assert block.block_id == block_packer.block_id(block.title, block.text)
    assert not [k for k in forbidden if block.start < k < block.end], block.text


@pytest.fixture(scope="module")
def tokenizer():
  return WordpieceTokenizer(VOCAB)


def test_clean_wikitext_sections_keeps_the_text_and_finds_section_starts():
  assert wikitext_cleaner.clean_wikitext_sections(PAGE) == (TEXT, SECTIONS)
  assert wikitext_cleaner.clean_wikitext(PAGE) == TEXT
  # No lead: the first section starts at 0, once; a page without prose has no sections.
  assert wikitext_cleaner.clean_wikitext_sections("== A ==\nThe cat.\n= B =\nThe dog.") == (
      "The cat.\nThe dog.", (0, 9))
  assert wikitext_cleaner.clean_wikitext_sections("== A ==\n{{stub}}") == ("", ())


@pytest.mark.parametrize("mode", block_packer.BLOCK_BOUNDARIES)
def test_pack_by_mode(tokenizer, mode):
  packer = block_packer.BlockPacker(tokenizer, block_length=12, max_title_wordpieces=4,
                                    boundaries=mode)
  blocks, jsonl_blocks = packer.pack([("Paris", TEXT), ("Paris", TEXT)], [SECTIONS, ()])
  assert [b.text for b in blocks] == EXPECTED[mode]
  assert [b.text for b in jsonl_blocks] == EXPECTED_JSONL[mode]
  check_blocks(tokenizer, 12, TEXT, blocks, breaks(TEXT, mode, SECTIONS))
  assert [b.text for b in packer.pack([("Paris", TEXT)])[0]] == EXPECTED_JSONL[mode]


def test_paragraph_mode_cuts_a_long_paragraph_at_sentence_ends_then_word_starts(tokenizer):
  text = "The cat sat.\nA big big big big big big big big big big cat sat. The dog ran.\nA dog."
  packer = block_packer.BlockPacker(tokenizer, block_length=12, max_title_wordpieces=4,
                                    boundaries="paragraph")
  blocks = packer.pack([("Paris", text)])[0]
  assert [b.text for b in blocks] == ["The cat sat.", "A big big big big big big big",
                                      "big big big cat sat.", "The dog ran.", "A dog."]
  check_blocks(tokenizer, 12, text, blocks, breaks(text, "paragraph", ()))


def test_unknown_boundaries_name_the_flag(tokenizer, tmp_path):
  with pytest.raises(errors.InputError, match=r"--block_boundaries=page: .*greedy, paragraph"):
    block_packer.BlockPacker(tokenizer, boundaries="page")
  config = wikipedia_to_blocks_lib.BlocksConfig(["x"], str(tmp_path), block_boundaries="page")
  with pytest.raises(errors.InputError, match="--block_boundaries=page"):
    wikipedia_to_blocks_lib.run_pipeline(beam.Pipeline(), config)


def test_dump_and_jsonl_documents_to_blocks_in_every_mode(tmp_path):
  dump = tmp_path / "dump.xml"
  dump.write_bytes(dump_xml(page_xml("Paris", PAGE, page_id=1)))
  jsonl = tmp_path / "docs.jsonl"
  jsonl.write_text(json.dumps({"title": "Lutetia", "text": TEXT}) + "\n")
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(VOCAB) + "\n")
  with test_pipeline.TestPipeline() as p:
    wiki = p | "Wiki" >> document_sources.ReadWikipediaDump([str(dump)])
    lines = p | "Jsonl" >> document_sources.ReadJsonlDocuments([str(jsonl)])
    assert_that(wiki["documents"] | "Starts" >> beam.Map(lambda d: d.section_starts),
                equal_to([SECTIONS]), label="starts")
    documents = (wiki["documents"], lines["documents"]) | beam.Flatten()
    for mode in block_packer.BLOCK_BOUNDARIES:
      blocks = documents | f"Pack_{mode}" >> wikipedia_to_blocks_lib.DocumentsToBlocks(
          str(vocab_file), block_length=12, max_title_wordpieces=4, boundaries=mode)
      expected = ([("Paris", t) for t in EXPECTED[mode]] +
                  [("Lutetia", t) for t in EXPECTED_JSONL[mode]])
      assert_that(blocks["blocks"] | f"Texts_{mode}" >> beam.Map(lambda b: (b.title, b.text)),
                  equal_to(expected), label=f"blocks_{mode}")


def test_real_dump_articles_in_every_mode():
  """The first 5 articles of the real dump: invariants in each mode; paragraph blocks are at
  least as many as section blocks, those at least as many as greedy ones."""
  path, articles = real_dump_path(), []
  with open(path, "rb") as f:
    for page in dump_reader.iter_dump_file(path, f):
      if (page.redirect is None and page.namespace == 0 and
          not wikitext_cleaner.is_disambiguation(page.title, page.text)):
        text, starts = wikitext_cleaner.clean_wikitext_sections(page.text)
        if text:
          articles.append((page.title, text, starts))
      if len(articles) == 5:
        break
  assert all(len(starts) > 1 for _, _, starts in articles)  # they have sections
  tokenizer = pretrained.minilm_tokenizer()
  counts = {}
  for mode in block_packer.BLOCK_BOUNDARIES:
    packer = block_packer.BlockPacker(tokenizer, boundaries=mode)
    packed = packer.pack([(t, text) for t, text, _ in articles], [s for _, _, s in articles])
    for (_, text, starts), blocks in zip(articles, packed):
      check_blocks(tokenizer, block_packer.BLOCK_LENGTH, text, blocks,
                   breaks(text, mode, starts))
    counts[mode] = sum(len(blocks) for blocks in packed)
  assert counts["paragraph"] > counts["section"] > counts["greedy"] > 5, counts
