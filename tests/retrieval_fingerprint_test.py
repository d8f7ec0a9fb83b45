"""The one corpus fingerprint: ids, titles and texts; the same from every corpus reader."""
import json

import numpy as np

from pipelines import block_records
from realm_tf import tiny_world
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.fingerprint import block_digest
from realm_tf.retrieval.fingerprint import corpus_fingerprint
from realm_tf.retrieval.fingerprint import fingerprint_digests

IDS, TITLES, TEXTS = np.array([7, 3, 5]), ["a", "b", "c"], ["x y", "z", ""]


def test_each_field_and_the_pairing_of_ids_with_blocks_counts():
  base = corpus_fingerprint(IDS, TITLES, TEXTS)
  assert len(base) == 64 and base == corpus_fingerprint(IDS, TITLES, TEXTS)
  assert base == corpus_fingerprint(IDS[::-1], TITLES[::-1], TEXTS[::-1])  # same blocks
  assert base != corpus_fingerprint([7, 3, 6], TITLES, TEXTS)
  assert base != corpus_fingerprint(IDS, ["a", "b", "d"], TEXTS)
  assert base != corpus_fingerprint(IDS, TITLES, ["x y", "z", "w"])
  assert base != corpus_fingerprint(IDS, TITLES, ["x", "y z", ""])
  assert base != corpus_fingerprint(IDS, ["ax y", "b", "c"], ["", "z", ""])  # field borders
  assert base != corpus_fingerprint([3, 7, 5], TITLES, TEXTS)  # another id per block
  assert base == fingerprint_digests(IDS, [block_digest(t, x) for t, x in zip(TITLES, TEXTS)])


def test_shard_and_jsonl_corpora_and_streamed_shards_agree(tmp_path):
  corpus_dir = str(tmp_path / "corpus")
  store, _ = tiny_world.write_pipeline(corpus_dir)
  expected = corpus_fingerprint(store.block_ids, store.titles, store.texts)
  assert store.fingerprint == expected
  assert Corpus.load(corpus_dir).fingerprint == expected
  ids, streamed = block_records.corpus_ids_and_fingerprint(corpus_dir, batch_size=3)
  assert streamed == expected and list(ids) == list(store.block_ids)
  jsonl = tmp_path / "corpus.jsonl"
  jsonl.write_text("\n".join(json.dumps({"id": int(i), "title": t, "text": x})
                             for i, t, x in zip(store.block_ids[::-1], store.titles[::-1],
                                                store.texts[::-1])))
  assert Corpus.load(str(jsonl)).fingerprint == expected
