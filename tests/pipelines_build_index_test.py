"""Tests for pipeline 3, the index builder: embeddings in block order -> published index.

Legend: N blocks, D embedding dimension.
"""
import os
import signal
import subprocess
import sys
import time

import apache_beam as beam
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np
import pytest
import tensorflow as tf

from pipelines import beam_runner
from pipelines import block_packer
from pipelines import block_records
from pipelines import build_index_lib
from pipelines import embedding_rows
from realm_tf import configs
from realm_tf.data import formats
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_builder import Sharding
from realm_tf.mips.manifest import IndexManifest
from realm_tf.mips.sharded_index import ShardedIndex
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization.bert_packer import BertPacker
from realm_tf.tokenization import WordpieceTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ["alpha", "beta", "gamma", "delta", "river", "city", "king", "war", "sea", "stone"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """~60 blocks of a small vocabulary, and a tiny doc-embedder export (D = 8, step 1200)."""
  base = tmp_path_factory.mktemp("index")
  rng = np.random.default_rng(0)
  documents = [(f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]}",
                " ".join(" ".join(rng.choice(WORDS, 6)).capitalize() + "." for _ in range(8)))
               for i in range(30)]
  packer = block_packer.BlockPacker(WordpieceTokenizer(VOCAB), block_length=32,
                                    max_title_wordpieces=4)
  corpus_dir = str(base / "corpus")
  os.makedirs(corpus_dir)
  blocks = [b for bs in packer.pack(documents) for b in bs]
  for shard in range(2):
    path = os.path.join(corpus_dir, f"blocks-{shard:05d}-of-00002.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
      for b in blocks[shard::2]:
        writer.write(formats.block_example(b.block_id, b.title, b.text, b.title_ids,
                                           b.body_ids))
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=len(VOCAB)), projection_size=8))
  retriever.build()
  embedder_dir = export_doc_embedder(retriever, str(base / "embedder"), 2, 3, 0,
                                     block_length=32, snapshot_step=1200)
  return corpus_dir, embedder_dir


def test_shards_split_the_id_space_in_order():
  assert [build_index_lib.shard_of(i, 4) for i in (0, 2**61 - 1, 2**61, 2**63 - 1)] == [
      0, 0, 1, 3]


def test_batches_do_not_depend_on_the_grouping_order():
  blocks = [block_records.BlockRecord(i, "t", "x", np.zeros([0]), np.zeros([0]))
            for i in (5, 3, 9, 1, 7)]
  for order in (blocks, blocks[::-1]):
    batches = list(build_index_lib._batches(  # pylint: disable=protected-access
        ((32, 0), order), 2))
    assert [[b.block_id for b in batch] for batch in batches] == [[1, 3], [5, 7], [9]]


def test_embed_and_write_shards(corpus, tmp_path):
  corpus_dir, embedder_dir = corpus
  store = Corpus.load(corpus_dir)
  out = str(tmp_path)
  with test_pipeline.TestPipeline() as p:
    counts = build_index_lib.build_pipeline(p, corpus_dir, embedder_dir, out, num_shards=4,
                                            blocks_per_batch=16)
    assert_that(counts | beam.combiners.Count.Globally(), equal_to([4]), label="shards")
    assert_that(counts | beam.Map(lambda c: c[1]) | beam.CombineGlobally(sum),
                equal_to([len(store)]), label="rows")
  ids, embeddings = build_index_lib.read_embedding_shards(out, 4)
  np.testing.assert_array_equal(ids, store.block_ids)  # shards in order = canonical order
  expected = DocEmbedder(embedder_dir).embed_blocks(store.title_ids, store.body_ids)  # [N, D]
  np.testing.assert_allclose(embeddings, expected, rtol=1e-4, atol=1e-5)


def test_length_bucket_is_the_padded_length():
  block = block_records.BlockRecord(7, "t", "b", np.arange(2), np.arange(10))  # 15 packed
  assert build_index_lib.length_bucket(block, 8, 32) == 16
  assert build_index_lib.length_bucket(block, 5, 32) == 15
  assert build_index_lib.length_bucket(block, 8, 12) == 12  # capped at the block length


def test_xla_export_embeds_length_bucketed_batches(corpus, tmp_path):
  """An XLA export through the builder: blocks batched per length bucket, short batches
  padded to full size, embeddings equal to the Keras model's on each block alone."""
  corpus_dir, _ = corpus
  store = Corpus.load(corpus_dir)
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=len(VOCAB)), projection_size=8))
  retriever.build()
  embedder_dir = export_doc_embedder(retriever, str(tmp_path / "xla"), 2, 3, 0,
                                     block_length=32, length_multiple=8, jit_compile=True)
  assert DocEmbedder(embedder_dir).jit_compile
  out = str(tmp_path / "shards")
  os.makedirs(out)
  records = [block_records.BlockRecord(int(i), "", "", np.asarray(t), np.asarray(b))
             for i, t, b in zip(store.block_ids, store.title_ids.to_list(),
                                store.body_ids.to_list())]
  buckets = {build_index_lib.length_bucket(r, 8, 32) for r in records}
  assert len(buckets) > 1
  with test_pipeline.TestPipeline() as p:
    embedded = (p | beam.Create(records)
                | build_index_lib.EmbedBlocks(embedder_dir, num_shards=2, blocks_per_batch=4))
    _ = embedded | build_index_lib.WriteEmbeddingShards(out, 2)
  counters = p.result.metrics().query()["counters"]
  batches = sum(c.committed for c in counters if c.key.metric.name == "embedding_batches")
  assert batches >= max(len(buckets), -(-len(records) // 4))
  ids, embeddings = build_index_lib.read_embedding_shards(out, 2)
  np.testing.assert_array_equal(ids, store.block_ids)
  packer = BertPacker(32, 2, 3, 0)
  expected = retriever.embed_documents(packer((tf.cast(store.title_ids.ragged(), tf.int32),
                                               tf.cast(store.body_ids.ragged(), tf.int32)))).numpy()
  np.testing.assert_allclose(embeddings, expected, rtol=1e-4, atol=1e-5)


def test_build_index_publishes_versions(corpus, tmp_path):
  corpus_dir, embedder_dir = corpus
  store = Corpus.load(corpus_dir)
  root = str(tmp_path / "index")
  first = build_index_lib.build_index(corpus_dir, embedder_dir, root, kind="brute_force",
                                      num_shards=3, blocks_per_batch=16)
  assert first.version == "step-00001200" and first.num_blocks == len(store)
  assert first.counters["blocks_embedded"] == len(store)
  assert first.counters["embedding_shards"] == 3
  assert sorted(os.listdir(root)) == ["LATEST", "step-00001200"]  # work dir removed
  version, exact, metadata = index_publisher.load_latest(root)
  assert metadata == {"corpus_fingerprint": store.fingerprint, "snapshot_step": 1200,
                      "embedder_dir": embedder_dir, "num_blocks": len(store)}
  ids, fingerprint = block_records.corpus_ids_and_fingerprint(corpus_dir)
  assert fingerprint == store.fingerprint and list(ids) == list(store.block_ids)
  second = build_index_lib.build_index(corpus_dir, embedder_dir, root, kind="scann",
                                       version="step-00002400",
                                       embeddings_dir=str(tmp_path / "kept"))
  assert index_publisher.latest_version(root) == second.version == "step-00002400"
  assert sorted(os.listdir(str(tmp_path / "kept"))) == ["embeddings-00000-of-00001.tfrecord",
                                                        "embeddings.manifest.json"]
  _, approximate, _ = index_publisher.load_latest(root)
  queries = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
  np.testing.assert_array_equal(approximate.search(queries, 5)[1], exact.search(queries, 5)[1])
  with pytest.raises(FileExistsError):
    build_index_lib.build_index(corpus_dir, embedder_dir, root, version="step-00002400")


def _write_embeddings(directory, ids, vectors, num_shards):
  """Writes rows as the pipeline's embedding shards, in order, split by `shard_of`."""
  owner = np.array([build_index_lib.shard_of(i, num_shards) for i in ids])
  for shard in range(num_shards):
    with tf.io.TFRecordWriter(build_index_lib.shard_path(directory, shard, num_shards)) as w:
      for row in np.nonzero(owner == shard)[0]:
        w.write(formats.embedding_example(int(ids[row]), vectors[row]))


def test_embedding_rows_are_checked_in_one_pass_and_sliced_across_files(tmp_path):
  ids = np.sort(np.random.default_rng(0).choice(1 << 62, 50, replace=False)) * 2
  vectors = np.random.default_rng(1).standard_normal((50, 4)).astype(np.float32)
  _write_embeddings(str(tmp_path), ids, vectors, 3)
  rows = embedding_rows.EmbeddingRows.check(str(tmp_path), 3, ids, 4)
  assert rows.shape == (50, 4) and sum(rows.counts) == 50 and len(rows.counts) == 3
  first_file = rows.counts[0]
  np.testing.assert_array_equal(rows[first_file - 2:first_file + 3],
                                vectors[first_file - 2:first_file + 3])  # two files
  np.testing.assert_array_equal(rows[0:50], vectors)
  error = build_index_lib.IndexBuildError
  with pytest.raises(error, match="50 embeddings for 51 corpus blocks"):
    embedding_rows.EmbeddingRows.check(str(tmp_path), 3, np.append(ids, ids[-1] + 1), 4)
  with pytest.raises(error, match="more than 49 embeddings"):
    embedding_rows.EmbeddingRows.check(str(tmp_path), 3, ids[:49], 4)
  wrong = ids.copy()
  wrong[7] += 1
  with pytest.raises(error, match="first mismatch at row 7"):
    embedding_rows.EmbeddingRows.check(str(tmp_path), 3, wrong, 4)
  with pytest.raises(error, match="expected \\[N, 5\\]"):
    embedding_rows.EmbeddingRows.check(str(tmp_path), 3, ids, 5)
  vectors[30, 2] = np.nan
  _write_embeddings(str(tmp_path), ids, vectors, 3)
  with pytest.raises(error, match="1 non-finite embedding values"):
    embedding_rows.EmbeddingRows.check(str(tmp_path), 3, ids, 4)


@pytest.mark.parametrize("runner", ["", "--runner=BundleBasedDirectRunner"])
def test_publish_embeddings_builds_index_shards_in_turn_or_on_workers(tmp_path, runner):
  """Local runner: the launcher builds the shards in turn; another runner: one Beam task per
  index shard. Either way the published sharded index is exact search over all rows."""
  ids = np.arange(1, 61, dtype=np.int64) << 56
  vectors = np.random.default_rng(2).standard_normal((60, 8)).astype(np.float32)
  embeddings_dir = str(tmp_path / "embeddings")
  os.makedirs(embeddings_dir)
  _write_embeddings(embeddings_dir, ids, vectors, 4)
  directory = build_index_lib.publish_embeddings(
      embeddings_dir, 4, ids, 8, str(tmp_path / "index"), "step-00000001", {"num_blocks": 60},
      "brute_force", ScannSettings(), Sharding(shard_size=25),
      beam_runner.pipeline_options(runner))
  manifest = IndexManifest.read(directory)
  assert manifest.kind == "sharded" and manifest.builder["shard_size"] == 25
  assert [e["num_docs"] for e in manifest.builder["shards"]] == [20, 20, 20]
  _, index, metadata = index_publisher.load_latest(str(tmp_path / "index"))
  assert isinstance(index, ShardedIndex) and metadata == {"num_blocks": 60}
  queries = vectors[:5]
  np.testing.assert_array_equal(index.search(queries, 30)[1],
                                BruteForceIndex(vectors).search(queries, 30)[1])


def test_builder_killed_mid_build_publishes_nothing(corpus, tmp_path):
  corpus_dir, embedder_dir = corpus
  root = str(tmp_path / "index")
  build_index_lib.build_index(corpus_dir, embedder_dir, root, kind="brute_force")
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  builder = subprocess.Popen(
      [sys.executable, "-m", "pipelines.build_index", f"--corpus_dir={corpus_dir}",
       f"--embedder_dir={embedder_dir}", f"--index_root={root}", "--version=step-00009999"],
      env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 600  # only a hang fails here: the loop waits for the partial
  partial = []
  while time.time() < deadline and not partial and builder.poll() is None:
    partial = [n for n in os.listdir(root) if ".tmp-" in n]
    time.sleep(0.05)
  os.kill(builder.pid, signal.SIGKILL)
  builder.wait()
  assert partial and partial[0].startswith("step-00009999.tmp-"), "the builder never started"
  assert index_publisher.latest_version(root) == "step-00001200"
  assert index_publisher.list_versions(root) == ["step-00001200"]
  assert index_publisher.load_latest(root)[1].num_docs == len(Corpus.load(corpus_dir))
  left_behind = sorted(n for n in os.listdir(root) if ".tmp-" in n)
  assert index_publisher.cleanup_partial(root) == left_behind
  assert sorted(os.listdir(root)) == ["LATEST", "step-00001200"]


def test_binary_scann_flags_are_checked_first_and_recorded_in_the_manifest(corpus, tmp_path):
  corpus_dir, embedder_dir = corpus
  root = str(tmp_path / "index")
  env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
  command = [sys.executable, "-m", "pipelines.build_index", f"--corpus={corpus_dir}",
             f"--embedder_dir={embedder_dir}", f"--index_root={root}"]
  num_blocks = len(Corpus.load(corpus_dir))
  bad = subprocess.run(command + [f"--scann_num_leaves={num_blocks + 1}"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
  assert bad.returncode == 2, bad.stderr[-2000:]
  assert (f"--scann_num_leaves: {num_blocks + 1} leaves for {num_blocks} documents"
          in bad.stderr)
  assert not os.path.exists(root) or not os.listdir(root)  # nothing embedded or published
  good = subprocess.run(command + ["--scann_num_leaves=4", "--scann_num_leaves_to_search=2",
                                   "--scann_dimensions_per_block=4", "--scann_reorder_k=20",
                                   f"--index_shard_size={num_blocks // 2 + 1}"],
                        env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
  assert good.returncode == 0, good.stderr[-2000:]
  top = IndexManifest.read(os.path.join(root, "step-00001200"))
  assert (top.kind, top.builder["shard_size"], len(top.builder["shards"])) == (
      "sharded", num_blocks // 2 + 1, 2)
  for shard in top.builder["shards"]:
    builder = IndexManifest.read(os.path.join(root, "step-00001200", shard["directory"])).builder
    assert (builder["num_leaves"], builder["num_leaves_to_search"],
            builder["dimensions_per_block"], builder["reorder_k"]) == (4, 2, 4, 20)
