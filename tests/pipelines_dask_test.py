"""Pipelines 1-3 on a distributed engine: `--runner=DaskRunner` on a `dask.distributed`
LocalCluster of 2 worker processes, checked against the local runner's outputs."""
import json
import os

import apache_beam as beam
import distributed
import numpy as np
import pytest
import tensorflow as tf

from pipelines import beam_runner
from pipelines import build_index_lib
from pipelines import pretraining_examples_lib
from pipelines import wikipedia_to_blocks_lib
from realm_tf.data import formats
from realm_tf.mips import manifest as manifest_lib
from realm_tf.retrieval.corpus import Corpus
import tiny_models
from wiki_dump_xml import dump_xml
from wiki_dump_xml import page_xml

pytestmark = pytest.mark.slow

PLACES = ["Paris", "Lyon", "Nantes", "Lille", "Rennes", "Nice"]


def _dump(path):
  """6 articles (dates for the salient spans), a duplicate, an empty page and a redirect."""
  pages = []
  for i, place in enumerate(PLACES):
    text = "\n\n".join(
        f"{place} was founded on {d + 1} May {1700 + 10 * i + d}. The river of {place} "
        f"floods the old town in spring, {d + i} times a century." for d in range(12))
    pages.append(page_xml(place, text, page_id=i + 1))
  pages += [pages[0].replace("<id>1</id>", "<id>40</id>"),
            page_xml("Empty", "", page_id=41), page_xml("Pari", "", page_id=42,
                                                        redirect="Paris")]
  path.write_bytes(dump_xml(*pages))
  return str(path)


@pytest.fixture(scope="module")
def cluster():
  """A dask.distributed cluster of 2 worker processes, 1 thread each."""
  with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                dashboard_address=None) as local:
    yield local


def _options(runner, cluster):
  if runner == "local":
    return ""
  return f"--runner=DaskRunner --dask_client_address={cluster.scheduler_address}"


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
  """Pipelines 1-3 on each runner: {runner: {"corpus", "examples", "index", "counters"}}."""
  base = tmp_path_factory.mktemp("runners")
  dump = _dump(base / "dump.xml")
  embedder = tiny_models.minilm_doc_embedder(str(base / "embedder"), snapshot_step=7)
  out = {}
  for runner in ("local", "dask"):
    dirs = {name: str(base / runner / name)
            for name in ("corpus", "examples", "index", "embeddings")}
    options = beam_runner.pipeline_options(_options(runner, cluster))
    counters = {"blocks": wikipedia_to_blocks_lib.run_pipeline(
        beam.Pipeline(options=options),
        wikipedia_to_blocks_lib.BlocksConfig([dump], dirs["corpus"], num_shards=2))}
    options = beam_runner.pipeline_options(_options(runner, cluster))
    counters["examples"] = pretraining_examples_lib.run_pipeline(
        beam.Pipeline(options=options), pretraining_examples_lib.ExamplesConfig(
            dirs["corpus"], dirs["examples"], tagger="dates", num_shards=2))
    counters["index"] = build_index_lib.build_index(
        dirs["corpus"], embedder, dirs["index"], kind="brute_force",
        pipeline_options=_options(runner, cluster), embeddings_dir=dirs["embeddings"],
        num_shards=2).counters
    out[runner] = dict(dirs, counters=counters)
  return out


def test_both_dask_workers_ran_tasks(runs, cluster):
  with distributed.Client(cluster) as client:
    executed = client.run(lambda dask_worker: dask_worker.state.executed_count)
  assert len(executed) == 2 and min(executed.values()) > 0, executed


def _blocks(corpus):
  store = Corpus.load(corpus)
  return sorted(zip(store.block_ids.tolist(), store.titles, store.texts,
                    store.title_ids.to_list(), store.body_ids.to_list()))


def test_blocks_equal_the_local_runners(runs):
  local, dask = (_blocks(runs[r]["corpus"]) for r in ("local", "dask"))
  assert len(local) > 6 and dask == local
  letters = [sorted(tf.io.gfile.GFile(path).read().splitlines()) for path in (
      os.path.join(runs[r]["corpus"], "dead_letter-00000-of-00001.jsonl")
      for r in ("local", "dask"))]
  assert letters[0] == letters[1] and [json.loads(line)["title"] for line in letters[0]] == [
      "Empty"]


def test_dask_counts_come_from_the_outputs(runs):
  local, dask = runs["local"]["counters"], runs["dask"]["counters"]
  assert dask["blocks"] == {"blocks": local["blocks"]["blocks"], "dead_letters": 1}
  paris = [b for b in _blocks(runs["local"]["corpus"]) if b[1] == "Paris"]
  assert local["blocks"]["blocks_duplicate"] == len(paris)  # one page twice
  assert dask["examples"] == {"examples": local["examples"]["examples"]}
  assert dask["examples"]["examples"] > 50
  assert dask["index"] == {}  # pipeline 3's counters are not needed: its checks read shards


def _examples(directory):
  files = sorted(tf.io.gfile.glob(os.path.join(directory, formats.EXAMPLES_PATTERN)))
  records = [formats.parse_pretraining_example(r) for r in tf.data.TFRecordDataset(files)]
  return sorted((int(r["block_id"]), r["query_ids"].numpy().tolist(), int(r["span_start"]),
                 int(r["span_end"]), r["span_label"].numpy(), r["span_text"].numpy())
                for r in records)


def test_examples_equal_the_local_runners(runs):
  local, dask = (_examples(runs[r]["examples"]) for r in ("local", "dask"))
  assert len(local) == runs["local"]["counters"]["examples"]["examples"] and dask == local


def test_embeddings_and_index_manifest_equal_the_local_runners(runs):
  (local_ids, local_rows), (dask_ids, dask_rows) = (
      build_index_lib.read_embedding_shards(runs[r]["embeddings"], 2) for r in ("local", "dask"))
  np.testing.assert_array_equal(dask_ids, local_ids)
  print(f"{len(local_ids)} embeddings, max |dask - local| = {np.abs(dask_rows - local_rows).max()}")
  np.testing.assert_allclose(dask_rows, local_rows, rtol=0, atol=1e-6)
  manifests = []
  for runner in ("local", "dask"):
    version = os.path.join(runs[runner]["index"], "step-00000007")
    manifest = json.loads(tf.io.gfile.GFile(
        os.path.join(version, manifest_lib.MANIFEST_NAME)).read())
    manifests.append(manifest)
  assert manifests[0] == manifests[1]
