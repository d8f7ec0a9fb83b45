"""Tests for pipeline 1 (Wikipedia -> blocks): block packing and each transform.

Legend: L block length, T wordpieces.
"""
import hashlib
import json
import os
import re

import apache_beam as beam
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np
import pytest

from pipelines import block_packer
from pipelines import dead_letter
from pipelines import document_sources
from pipelines import wikipedia_to_blocks_lib
from realm_tf.data import shards
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization import WordpieceTokenizer
from wiki_dump_xml import dump_xml
from wiki_dump_xml import page_xml

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ".",
         "dog", "ran", "##s", "a", "big", "paris", "is", "in", "france", ","]


def ids(text):
  return [VOCAB.index(t) if t in VOCAB else 1 for t in text]


@pytest.fixture(scope="module")
def tokenizer():
  return WordpieceTokenizer(VOCAB)


@pytest.fixture()
def vocab_file(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n")
  return str(path)


def test_block_id_is_a_stable_63_bit_content_hash():
  first = block_packer.block_id("Paris", "Paris is in France.")
  assert first == block_packer.block_id("Paris", "Paris is in France.")
  assert first != block_packer.block_id("Paris", "Paris is in France!")
  assert first != block_packer.block_id("Paris is", "in France.")
  assert 0 <= first < 2**63
  digest = hashlib.sha256("Paris\nParis is in France.".encode()).digest()
  assert first == int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def test_pack_greedy_title_first_and_long_sentence_split(tokenizer):
  packer = block_packer.BlockPacker(tokenizer, block_length=12, max_title_wordpieces=4)
  text = ("The cat sat on the mat. The dog ran.\n"
          "A big big big big big big big big big big cat sat. Cats cats cats cats cats.")
  blocks = packer.pack([("Paris", text)])[0]
  assert [b.text for b in blocks] == [
      "The cat sat on the mat.", "The dog ran.", "A big big big big big big big",
      "big big big cat sat.", "Cats cats cats cats", "cats."]
  for block in blocks:
    assert block.title_ids.tolist() == ids(["paris"])
    assert len(block.title_ids) + len(block.body_ids) + 3 <= 12
    assert block.body_ids.tolist() == tokenizer(block.text).numpy().tolist()
    assert text[block.start:block.end] == block.text
    assert block.block_id == block_packer.block_id("Paris", block.text)
  assert blocks[0].body_ids.tolist() == ids("the cat sat on the mat .".split())
  assert blocks[4].body_ids.tolist() == ids(["cat", "##s"] * 4)  # never inside a word


def test_pack_a_multi_megabyte_sentence_completely(tokenizer):
  # A JSONL record of one 2.5 MB sentence (no terminator): cut into pieces at word starts in
  # one pass (mapping each cut's byte offset to characters from the start was quadratic).
  words = ["cats", "dog", "é", "big", "mat"]  # "é" ([UNK]): 2 bytes, 1 character
  text = " ".join(words[i % len(words)] for i in range(600_000))
  blocks = block_packer.BlockPacker(tokenizer).pack([("Paris", text)])[0]
  assert len(text) > 2_000_000 and len(blocks) > 2_000
  assert " ".join(b.text for b in blocks) == text
  assert all(text[b.start:b.end] == b.text for b in blocks)
  assert all(len(b.title_ids) + len(b.body_ids) + 3 <= block_packer.BLOCK_LENGTH for b in blocks)
  for block in blocks[:3] + blocks[-3:]:
    assert block.body_ids.tolist() == tokenizer(block.text).numpy().tolist()


def test_pack_batch_equals_one_by_one(tokenizer):
  packer = block_packer.BlockPacker(tokenizer, block_length=12, max_title_wordpieces=4)
  documents = [("Paris", "The cat sat. The dog ran on the mat."), ("France", "A big dog."),
               ("Empty", "   ")]
  batched = packer.pack(documents)
  single = [packer.pack([d])[0] for d in documents]
  assert [[b.text for b in bs] for bs in batched] == [[b.text for b in bs] for bs in single]
  assert batched[2] == []


def test_pack_rejects_a_title_without_room(tokenizer):
  packer = block_packer.BlockPacker(tokenizer, block_length=12, max_title_wordpieces=2)
  with pytest.raises(block_packer.BlockPackingError, match="title"):
    packer.pack([("the big big cat", "The cat sat.")])


def _write(path, data: bytes) -> str:
  with open(path, "wb") as f:
    f.write(data)
  return str(path)


ARTICLE = "'''Paris''' is in [[France]]. The cat sat on the mat.<ref>cite</ref>"


def test_read_wikipedia_dump_filters_and_dead_letters(tmp_path):
  good = _write(tmp_path / "good.xml", dump_xml(
      page_xml("Paris", ARTICLE, page_id=1),
      page_xml("Lutetia", "#REDIRECT [[Paris]]", page_id=2, redirect="Paris"),
      page_xml("Talk:Paris", "Chat about Paris.", ns=1, page_id=3),
      page_xml("Paris (disambiguation)", "'''Paris''' may be: x", page_id=4),
      page_xml("Empty", "", page_id=5),
      page_xml("Bad bytes", "The cat INVALID sat.", page_id=6),
      page_xml("Huge", "The cat sat. " * 400, page_id=7),
      page_xml("Broken", "Intro.\n[[File:x|" + "caption [[link " * 30, page_id=8),
      page_xml("Listy", "* [[a]]\n* [[b]]", page_id=9)).replace(b"INVALID", b"\xc3\x28"))
  full = dump_xml(*(page_xml(f"T{i}", f"The dog ran {i}.", page_id=10 + i) for i in range(3)))
  cut_at = full.index(b"ran 2")
  cut_line = full[:cut_at].count(b"\n") + 1
  cut = _write(tmp_path / "cut.xml", full[:cut_at])
  with test_pipeline.TestPipeline() as p:
    out = p | document_sources.ReadWikipediaDump([good, cut], max_page_bytes=2000)
    assert_that(out["documents"] | beam.Map(lambda d: (d.title, d.text)), equal_to([
        ("Paris", "Paris is in France. The cat sat on the mat."),
        ("T0", "The dog ran 0."), ("T1", "The dog ran 1.")]), label="documents")
    reasons = out[dead_letter.DEAD_LETTER] | beam.Map(
        lambda r: (os.path.basename(r["source"]), r["title"], r["stage"],
                   r["reason"].split(":")[0]))
    assert_that(reasons, equal_to([
        ("good.xml", "Empty", "clean_page", "empty page"),
        ("good.xml", "Bad bytes", "clean_page", "invalid UTF-8"),
        ("good.xml", "Huge", "clean_page", "over-long page"),
        ("good.xml", "Broken", "clean_page", "malformed wikitext"),
        ("good.xml", "Listy", "clean_page", "empty page"),
        ("cut.xml", "T1", "read_dump", "dump truncated at decompressed byte "
         f"{cut_at} (line {cut_line}) "
         "after 2 complete pages (last")]), label="dead")
    offsets = out["documents"] | beam.Map(lambda d: (d.title, d.offset))
    expected_offset = dump_xml(page_xml("Paris", ARTICLE, page_id=1)).index(b"<page>")
    assert_that(offsets | beam.Filter(lambda t: t[0] == "Paris"),
                equal_to([("Paris", expected_offset)]), label="offset")


def test_dump_page_without_title_is_a_dead_letter_not_lost(tmp_path):
  data = dump_xml(page_xml("Paris", ARTICLE, page_id=1),
                  page_xml("NOTITLE", "The dog ran.", page_id=2),
                  page_xml("", "The cat ran.", page_id=3))
  path = _write(tmp_path / "dump.xml", data.replace(b"<title>NOTITLE</title>", b""))
  with test_pipeline.TestPipeline() as p:
    out = p | document_sources.ReadWikipediaDump([path])
    assert_that(out["documents"] | beam.Map(lambda d: d.title), equal_to(["Paris"]),
                label="documents")
    assert_that(out[dead_letter.DEAD_LETTER] | beam.Map(
        lambda r: (r["offset"], r["stage"], r["reason"])), equal_to([
            (data.index(b"<page>", data.index(b"NOTITLE") - 20), "clean_page",
             "no title: the page has no <title> element, or an empty one"),
            (data.rindex(b"<page>") - len(b"<title>NOTITLE</title>"), "clean_page",
             "no title: the page has no <title> element, or an empty one")]), label="dead")


def test_jsonl_byte_order_mark_keeps_the_first_document(tmp_path):
  lines = [{"title": "Paris", "text": "Paris is in France."}, {"title": "Cat", "text": "A cat."}]
  data = b"\xef\xbb\xbf" + "\n".join(json.dumps(line) for line in lines).encode() + b"\n"
  path = _write(tmp_path / "docs.jsonl", data)
  with test_pipeline.TestPipeline() as p:
    out = p | document_sources.ReadJsonlDocuments([path])
    assert_that(out["documents"] | beam.Map(lambda d: (d.title, d.offset)),
                equal_to([("Paris", 1), ("Cat", 2)]), label="docs")
    assert_that(out[dead_letter.DEAD_LETTER], equal_to([]), label="dead")


def test_read_jsonl_documents_and_dead_letters(tmp_path):
  lines = [json.dumps({"title": "Paris", "text": "Paris is in France.\n\n  The   cat sat. "}),
           "{not json",
           json.dumps({"title": "NoText"}),
           json.dumps({"title": "Blank", "text": " \n "}),
           json.dumps({"title": "Huge", "text": "x" * 500}),
           '{"title": "Lone\\ud800", "text": "a \\ud800 b"}']
  data = ("\n".join(lines) + "\n").encode() + b'{"title": "Bytes", "text": "a\xff"}\n'
  path = _write(tmp_path / "docs.jsonl", data)
  with test_pipeline.TestPipeline() as p:
    out = p | document_sources.ReadJsonlDocuments([path], max_page_bytes=300)
    assert_that(out["documents"] | beam.Map(lambda d: (d.title, d.text, d.offset)),
                equal_to([("Paris", "Paris is in France.\nThe cat sat.", 1)]), label="docs")
    assert_that(out[dead_letter.DEAD_LETTER] | beam.Map(
        lambda r: (r["offset"], r["title"], r["reason"].split(":")[0])), equal_to([
            (2, "", "not JSON"), (3, "NoText", "no string field 'text'"),
            (4, "Blank", "empty document"), (5, "Huge", "over-long document"),
            (6, "Lone\\ud800", "'title' holds the lone surrogate U+D800 at character 4. Write "
             "the character itself, or escape both halves of its UTF-16 surrogate pair"),
            (7, "Bytes", "invalid UTF-8 at byte 29 of the line")]), label="dead")


def test_documents_to_blocks_and_deduplicate(vocab_file):
  docs = [document_sources.Document("Paris", "The cat sat. The dog ran.", "s", 1),
          document_sources.Document("Paris", "The cat sat. The dog ran.", "s", 2),
          document_sources.Document("France", "A big dog.", "s", 3),
          document_sources.Document("the big big big cat", "The cat.", "s", 4),
          document_sources.Document("Nothing", "\u200b", "s", 5)]
  with test_pipeline.TestPipeline() as p:
    packed = (p | beam.Create(docs) | wikipedia_to_blocks_lib.DocumentsToBlocks(
        vocab_file, block_length=10, max_title_wordpieces=3))
    unique = packed["blocks"] | wikipedia_to_blocks_lib.DeduplicateBlocks()
    assert_that(unique["blocks"] | beam.Map(lambda b: (b.title, b.text, b.body_ids.tolist())),
                equal_to([("Paris", "The cat sat.", ids("the cat sat .".split())),
                          ("Paris", "The dog ran.", ids("the dog ran .".split())),
                          ("France", "A big dog.", ids("a big dog .".split()))]),
                label="blocks")
    assert_that(packed[dead_letter.DEAD_LETTER] | beam.Map(
        lambda r: (r["offset"], r["reason"].split(" ")[0])),
                equal_to([(4, "title"), (5, "empty")]), label="dead")


def test_hash_collision_goes_to_dead_letters():
  make = lambda text: block_packer.Block(7, "T", text, np.array([5]), np.array([6]), 0, 1)
  with test_pipeline.TestPipeline() as p:
    out = p | beam.Create([make("b"), make("a"), make("a")]) | (
        wikipedia_to_blocks_lib.DeduplicateBlocks())
    assert_that(out["blocks"] | beam.Map(lambda b: b.text), equal_to(["a"]), label="kept")
    assert_that(out[dead_letter.DEAD_LETTER] | beam.Map(lambda r: r["stage"]),
                equal_to(["deduplicate_blocks"]), label="dead")


def test_run_pipeline_writes_the_corpus(tmp_path):
  sentences = [f"Sentence number {i} tells about the city of Paris in France." for i in range(60)]
  text = "\n".join(" ".join(sentences[i:i + 6]) for i in range(0, 60, 6))
  xml = dump_xml(page_xml("Paris", text.replace("\n", "\n\n"), page_id=1),
                 page_xml("Paris", text.replace("\n", "\n\n"), page_id=2),  # a duplicate
                 page_xml("Empty", "", page_id=3))
  source = _write(tmp_path / "dump.xml", xml)
  out = str(tmp_path / "corpus")
  config = wikipedia_to_blocks_lib.BlocksConfig([source], out, num_shards=2)
  counters = wikipedia_to_blocks_lib.run_pipeline(beam.Pipeline(), config)
  store = Corpus.load(out)
  assert sorted(os.listdir(out)) == ["blocks-00000-of-00002.tfrecord",
                                     "blocks-00001-of-00002.tfrecord",
                                     "blocks.manifest.json", "corpus",
                                     "dead_letter-00000-of-00001.jsonl"]
  assert store.directory == os.path.join(out, "corpus")  # the launcher converted the shards
  manifest = shards.check_shards(out, "blocks").manifest
  assert manifest["num_records"] == len(store) and manifest["config"]["num_shards"] == 2
  blocks = sorted(zip(store.texts, store.body_ids.to_list(), store.title_ids.to_list()),
                  key=lambda b: text.index(b[0]))
  assert len(blocks) > 2 and all(len(t) + len(b) + 3 <= 288 for _, b, t in blocks)
  assert re.sub(r"\s", "", "".join(b[0] for b in blocks)) == re.sub(r"\s", "", text)
  assert counters["pages_read"] == 3 and counters["pages_kept"] == 2
  assert counters["blocks"] == len(store) and counters["blocks_duplicate"] == len(store)
  assert counters["dead_letters"] == 1
  with open(os.path.join(out, "dead_letter-00000-of-00001.jsonl")) as f:
    record = json.loads(f.read())
  assert record["title"] == "Empty" and record["source"] == source
  assert xml[record["offset"]:].startswith(b"<page>")
