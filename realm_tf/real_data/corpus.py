"""The benchmark corpus: Wikipedia lead extracts as blocks, prepared once per directory.

`prepare_corpus` writes the articles of `realm_tf.demo.wikipedia` (the first `num_docs` in
title order, or all 10,033) as JSONL documents, packs them into blocks `[CLS] title [SEP] body
[SEP]` of at most `block_length` wordpieces with the Beam pipeline
`pipelines.wikipedia_to_blocks_lib` (as the demo's `corpus` stage does), and reads them back as
a `Corpus`. `corpus.json`, written last, marks a completed preparation: a later call with
the same settings only reads the blocks back; other settings prepare the corpus again.

Layout of `cache_dir`: documents.jsonl, blocks/ (the pipeline's shards), corpus.json.
"""
import dataclasses
import json
import os
import shutil
import time
from typing import Any, Dict, Tuple

import apache_beam as beam

from pipelines import beam_runner
from pipelines import wikipedia_to_blocks_lib
from realm_tf.demo import wikipedia
from realm_tf.retrieval.corpus import Corpus

MARKER = "corpus.json"


@dataclasses.dataclass(frozen=True)
class CorpusInfo:
  """What `prepare_corpus` built (or found).

  Attributes:
    num_docs, block_length: the settings.
    articles: articles written; articles_packed: those the pipeline packed into blocks;
    blocks: N; mean_wordpieces: mean packed block length, specials included;
    dead_letters: records of the pipeline's dead-letter output; seconds: wall time of the
    preparation that built the blocks; reused: whether this call found them prepared.
  """
  num_docs: int
  block_length: int
  articles: int
  articles_packed: int
  blocks: int
  mean_wordpieces: float
  dead_letters: int
  seconds: float
  reused: bool = False


def _settings(num_docs: int, block_length: int) -> Dict[str, int]:
  return {"num_docs": num_docs, "block_length": block_length}


def _read_marker(cache_dir: str) -> Dict[str, Any]:
  path = os.path.join(cache_dir, MARKER)
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def prepare_corpus(cache_dir: str, num_docs: int = 0, block_length: int = 128,
                   pipeline_options: str = "") -> Tuple[Corpus, CorpusInfo]:
  """The blocks of the first `num_docs` lead extracts (0: all), prepared or reused.

  Args:
    cache_dir: where the documents, blocks and marker live.
    num_docs: articles in title order (0: all 10,033).
    block_length: wordpieces of a packed block, specials included.
    pipeline_options: Beam options (default: DirectRunner).

  Returns:
    (store of N blocks, its `CorpusInfo`).
  """
  marker = _read_marker(cache_dir)
  blocks_dir = os.path.join(cache_dir, "blocks")
  if marker and {k: marker.get(k) for k in ("num_docs", "block_length")} == _settings(
      num_docs, block_length):
    return Corpus.load(blocks_dir), CorpusInfo(**dict(marker, reused=True))
  started = time.perf_counter()
  for stale in (os.path.join(cache_dir, MARKER), blocks_dir):
    if os.path.isdir(stale):
      shutil.rmtree(stale)
    elif os.path.exists(stale):
      os.remove(stale)
  titles, bodies = wikipedia.load_wiki_summaries(limit=num_docs)
  documents = os.path.join(cache_dir, "documents.jsonl")
  wikipedia.write_documents(titles, bodies, range(len(titles)), documents)
  counters = wikipedia_to_blocks_lib.run_pipeline(
      beam.Pipeline(options=beam_runner.pipeline_options(pipeline_options)),
      wikipedia_to_blocks_lib.BlocksConfig([documents], blocks_dir, input_format="jsonl",
                                           block_length=block_length))
  store = Corpus.load(blocks_dir)
  lengths = store.title_ids.row_lengths() + store.body_ids.row_lengths() + 3
  info = CorpusInfo(num_docs=num_docs, block_length=block_length, articles=len(titles),
                    articles_packed=int(counters.get("articles_packed", 0)),
                    blocks=len(store), mean_wordpieces=float(lengths.mean()),
                    dead_letters=int(counters.get("dead_letters", 0)),
                    seconds=time.perf_counter() - started)
  record = dataclasses.asdict(info)
  del record["reused"]
  tmp = os.path.join(cache_dir, MARKER + ".tmp")
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1)
  os.replace(tmp, os.path.join(cache_dir, MARKER))
  return store, info
