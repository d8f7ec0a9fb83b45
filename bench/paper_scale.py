"""Paper scale on one machine: REALM's 13,353,718 blocks written, opened, indexed and searched.

  python bench/paper_scale.py --num_blocks=1000000,3000000,13353718 --work_dir=/data/paper_scale

For each N every stage runs in a fresh process (its resident memory its own) over the synthetic
corpus and embeddings of `bench/paper_scale_data.py`, through the code users run: write (the
corpus with `CorpusWriter`, the embeddings `.npy`), open (`Corpus.load`), featurize (K = 8
candidates x B = 512 blocks through `CandidateBuilder`), index (the sharded ScaNN index built
and published), search (the refresher's swap, p50/p99 of 1 and of 512 queries, recall@10),
pretrain (4 `realm-pretrain` steps), qa_index, finetune and serve (`bench/paper_scale_qa.py`),
dpr (`--dpr_passages`: a DPR-shaped psgs_w100.tsv through `Corpus.load`). Embedding itself is
not timed at this size on 2 cores. Peak RSS is the process's `ru_maxrss`; "RSS growth" (VmRSS
after minus before) counts the pages of memory-mapped files touched, which are the page
cache's. Writes bench/results/paper_scale.{json,md}.
"""
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=wrong-import-position
from bench import paper_scale_data as data  # pylint: disable=wrong-import-position
from bench import paper_scale_qa  # pylint: disable=wrong-import-position

_NUM_BLOCKS = flags.DEFINE_list("num_blocks", ["1000000", "3000000", "13353718"], "Sizes N.")
_STAGES = flags.DEFINE_list("stages", ["write", "open", "featurize", "index", "search"],
                            "Stages to run for each N.")
_WORK_DIR = flags.DEFINE_string("work_dir", "/tmp/paper_scale", "Where the data goes.")
_SHARD_SIZE = flags.DEFINE_integer("index_shard_size", 1_000_000, "Rows per index shard.")
_LEAVES = flags.DEFINE_integer("scann_num_leaves", 0, "ScaNN leaves per shard (0: sqrt).")
_SEARCHED = flags.DEFINE_integer("scann_num_leaves_to_search", 0,
                                 "ScaNN leaves searched per shard (0: 1/20 of the leaves).")
_DPR_PASSAGES = flags.DEFINE_integer("dpr_passages", 21_015_324, "Passages of the dpr stage.")
_STAGE = flags.DEFINE_string("stage", "", "Internal: run one stage in this process.")
_N = flags.DEFINE_integer("n", 0, "Internal: the N of --stage.")
_NAME = flags.DEFINE_string("name", "paper_scale", "Result file name.")


def _rss(field: str = "VmRSS") -> int:
  """Resident bytes: all (VmRSS), or the process's own memory alone (RssAnon; the rest is
  pages of mapped files, the page cache's)."""
  with open("/proc/self/status", encoding="ascii") as f:
    return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def _peak() -> int:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _paths(n: int):
  root = os.path.join(_WORK_DIR.value, f"n{n}")
  return {"corpus": os.path.join(root, "corpus"), "embeddings": os.path.join(root, "emb.npy"),
          "pretrain": os.path.join(root, "pretrain"), "examples": os.path.join(root, "examples"),
          "index_root": os.path.join(root, "pretrain", "index"),
          "finetune": os.path.join(root, "finetune"),
          "sample": os.path.join(_WORK_DIR.value, "leads288")}


def stage_write(n: int, paths) -> dict:
  import shutil  # pylint: disable=import-outside-toplevel
  sample = data.real_block_sample(paths["sample"])
  shutil.rmtree(paths["corpus"], ignore_errors=True)
  started = time.perf_counter()
  data.write_corpus(paths["corpus"], n, sample)
  corpus_seconds = time.perf_counter() - started
  started = time.perf_counter()
  data.write_embeddings(paths["embeddings"], n)
  sizes = {}
  for folder, _, files in os.walk(paths["corpus"]):
    for name in files:
      key = os.path.relpath(os.path.join(folder, name), paths["corpus"])
      sizes[key] = os.path.getsize(os.path.join(folder, name)) / n
  return {"write_corpus_s": corpus_seconds, "write_embeddings_s": time.perf_counter() - started,
          "corpus_bytes_per_block": sum(sizes.values()), "file_bytes_per_block": sizes,
          "embedding_bytes_per_block": os.path.getsize(paths["embeddings"]) / n,
          "peak_rss": _peak()}


def stage_open(n: int, paths) -> dict:
  from realm_tf.retrieval.corpus import Corpus  # pylint: disable=import-outside-toplevel
  before, anon = _rss(), _rss("RssAnon")
  started = time.perf_counter()
  store = Corpus.load(paths["corpus"])
  seconds = time.perf_counter() - started
  fingerprint = store.fingerprint
  grown, anon_grown = _rss() - before, _rss("RssAnon") - anon
  rng = np.random.default_rng(0)
  rows = rng.integers(n, size=1000)
  started = time.perf_counter()
  texts = [store.texts[r] for r in rows]
  read_s = (time.perf_counter() - started) / len(rows)
  return {"open_s": seconds, "open_rss_growth": grown, "open_bytes_per_block": grown / n,
          "open_anon_growth": anon_grown,
          "blocks": len(store), "fingerprint": fingerprint[:12],
          "text_read_us": read_s * 1e6, "text_chars": float(np.mean([len(t) for t in texts]))}


def stage_featurize(n: int, paths) -> dict:
  from realm_tf import pretrained  # pylint: disable=import-outside-toplevel
  from realm_tf.retrieval.corpus import Corpus  # pylint: disable=import-outside-toplevel
  from realm_tf.tokenization.featurizers import Featurizer  # pylint: disable=import-outside-toplevel
  from realm_tf.training.candidates import CandidateBuilder  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  store = Corpus.load(paths["corpus"])
  before, anon = _rss(), _rss("RssAnon")
  builder = CandidateBuilder(store, Featurizer(pretrained.minilm_tokenizer(), 96, 288), 8)
  rng = np.random.default_rng(0)
  query_ids = tf.ragged.constant([[2000 + i % 100] * 20 for i in range(512)], tf.int64)
  builder.features(rng.integers(n, size=[512, 8]), query_ids)  # traces
  times = []
  for _ in range(5):
    rows = rng.integers(n, size=[512, 8])
    started = time.perf_counter()
    docs, _ = builder.features(rows, query_ids)
    docs["input_word_ids"].numpy()
    times.append(time.perf_counter() - started)
  return {"featurize_blocks_per_s": 512 * 8 / float(np.median(times)),
          "featurize_batch_s": float(np.median(times)), "featurize_rss_growth": _rss() - before,
          "featurize_anon_growth": _rss("RssAnon") - anon}


def stage_index(n: int, paths) -> dict:
  import shutil  # pylint: disable=import-outside-toplevel
  from realm_tf.mips import index_builder  # pylint: disable=import-outside-toplevel
  from realm_tf.mips import index_publisher  # pylint: disable=import-outside-toplevel
  from realm_tf.retrieval.corpus import Corpus  # pylint: disable=import-outside-toplevel
  fingerprint = Corpus.load(paths["corpus"]).fingerprint
  shutil.rmtree(paths["index_root"], ignore_errors=True)
  embeddings = np.load(paths["embeddings"], mmap_mode="r")
  settings = index_builder.ScannSettings(num_leaves=_LEAVES.value,
                                         num_leaves_to_search=_SEARCHED.value)
  sharding = index_builder.Sharding(shard_size=_SHARD_SIZE.value)
  before = _rss()
  started = time.perf_counter()
  index_publisher.publish(
      lambda directory: index_builder.save_index(embeddings, directory, "scann", settings,
                                                 sharding),
      paths["index_root"], index_publisher.version_for_step(0),
      {"corpus_fingerprint": fingerprint, "snapshot_step": 0})
  seconds = time.perf_counter() - started
  version = os.path.join(paths["index_root"], index_publisher.version_for_step(0))
  size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(version) for f in fs)
  return {"index_build_publish_s": seconds, "index_peak_rss": _peak(), "index_rss_before": before,
          "index_peak_over_embeddings": (_peak() - before) / (n * data.DIM * 4),
          "index_bytes_per_block": size / n,
          "index_shards": len(sharding.shard_ranges(n)),
          "scann_leaves_searched": f"{_SEARCHED.value or 'auto'}/{_LEAVES.value or 'auto'}"}


def stage_search(n: int, paths) -> dict:
  from realm_tf.mips import index_publisher  # pylint: disable=import-outside-toplevel
  before = _rss()
  started = time.perf_counter()
  version = index_publisher.latest_version(paths["index_root"])  # the refresher's swap: the
  index = index_publisher.load_version(paths["index_root"], version,  # build verified it
                                       verify_checksums=False)
  load_s = time.perf_counter() - started
  loaded_rss = _rss() - before
  query = data.queries(1000)
  index.search(query[:1], 10)
  index.search(query[:512], 10)
  one = []
  for q in range(200):
    started = time.perf_counter()
    index.search(query[q:q + 1], 10)[1].numpy()
    one.append(time.perf_counter() - started)
  batch = []
  for _ in range(5):
    started = time.perf_counter()
    index.search(query[:512], 10)[1].numpy()
    batch.append(time.perf_counter() - started)
  found = np.concatenate([index.search(query[b:b + 250], 10)[1].numpy()
                          for b in range(0, 1000, 250)])
  search_peak = _peak()
  exact = data.exact_top_k(np.load(paths["embeddings"], mmap_mode="r"), query, 10)
  recall = float(np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact)]))
  return {"swap_load_s": load_s, "index_loaded_rss": loaded_rss, "search_peak_rss": search_peak,
          "search1_p50_ms": 1e3 * float(np.percentile(one, 50)),
          "search1_p99_ms": 1e3 * float(np.percentile(one, 99)),
          "search512_p50_ms": 1e3 * float(np.percentile(batch, 50)),
          "search512_p99_ms": 1e3 * float(np.percentile(batch, 99)),
          "recall10_vs_exact": recall}


def stage_dpr(n: int, paths) -> dict:
  from realm_tf.retrieval.corpus import Corpus  # pylint: disable=import-outside-toplevel
  tsv = os.path.join(_WORK_DIR.value, f"psgs_w100_{n}.tsv")
  started = time.perf_counter()
  if not os.path.exists(tsv):
    data.write_dpr_tsv(tsv, n, data.real_block_sample(paths["sample"]))
  write_s = time.perf_counter() - started
  before = _rss()
  started = time.perf_counter()
  store = Corpus.load(tsv, cache_dir=os.path.join(_WORK_DIR.value, "cache"))
  return {"dpr_passages": len(store), "dpr_tsv_bytes": os.path.getsize(tsv),
          "dpr_write_tsv_s": write_s, "dpr_load_s": time.perf_counter() - started,
          "dpr_peak_rss": _peak(), "dpr_rss_before": before,
          "dpr_bytes_per_passage": (_peak() - before) / len(store)}


def _child_peak(command) -> dict:
  """Runs a binary to completion; its wall seconds and peak RSS (of the largest child)."""
  started = time.perf_counter()
  result = subprocess.run(command, capture_output=True, text=True, check=False)
  if result.returncode:
    raise RuntimeError(f"{command[0]} failed:\n{result.stderr[-3000:]}")
  return {"seconds": time.perf_counter() - started,
          "peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}


def stage_pretrain(n: int, paths) -> dict:
  """`realm-pretrain` for a few steps (MiniLM towers, K = 8, B = 2) on the N-block corpus with
  the published step-0 index (loaded as a resumed run's), no refresh before the last step."""
  import shutil  # pylint: disable=import-outside-toplevel
  shutil.rmtree(paths["examples"], ignore_errors=True)
  data.write_examples(paths["examples"], n)
  for name in os.listdir(paths["pretrain"]):
    if name != "index":
      shutil.rmtree(os.path.join(paths["pretrain"], name), ignore_errors=True)
  binary = os.path.join(os.path.dirname(sys.executable), "realm-pretrain")
  out = _child_peak([binary, f"--corpus={paths['corpus']}", f"--examples_dir={paths['examples']}",
                     f"--model_dir={paths['pretrain']}", "--num_steps=4", "--batch_size=2",
                     "--refresh=sync", "--refresh_every=100000", "--mlm_warmup_steps=0",
                     "--checkpoint_every=100000", "--keep_indexes=1",
                     "--retriever_head=realm"])
  return {"pretrain_s": out["seconds"], "pretrain_peak_rss": out["peak_rss"]}


STAGES = {"write": stage_write, "open": stage_open, "featurize": stage_featurize,
          "index": stage_index, "search": stage_search, "pretrain": stage_pretrain,
          "dpr": stage_dpr, **paper_scale_qa.STAGES}


def _run_stage(stage: str, n: int) -> dict:
  command = [sys.executable, os.path.abspath(__file__), f"--stage={stage}", f"--n={n}",
             f"--work_dir={_WORK_DIR.value}", f"--index_shard_size={_SHARD_SIZE.value}",
             f"--scann_num_leaves={_LEAVES.value}",
             f"--scann_num_leaves_to_search={_SEARCHED.value}"]
  started = time.perf_counter()
  result = subprocess.run(command, capture_output=True, text=True, check=False)
  lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
  if result.returncode or not lines:
    raise RuntimeError(f"stage {stage} at N={n} failed:\n{result.stderr[-3000:]}")
  out = json.loads(lines[-1][len("RESULT "):])
  out[f"{stage}_process_s"] = time.perf_counter() - started
  print(f"N={n:,} {stage}: {json.dumps(out)}", flush=True)
  return out


def main(argv):
  del argv
  if _STAGE.value:
    result = STAGES[_STAGE.value](_N.value, _paths(_N.value))
    print("RESULT " + json.dumps(result, default=float), flush=True)
    return
  os.makedirs(_WORK_DIR.value, exist_ok=True)
  for n in [int(v) for v in _NUM_BLOCKS.value]:
    for stage in _STAGES.value:
      size = _DPR_PASSAGES.value if stage == "dpr" else n
      _save(size, _run_stage(stage, size))
  rows = _load_rows()
  rows = [rows[k] for k in sorted(rows)]
  print(_markdown(rows))


def _load_rows() -> dict:
  """The rows already measured, by N (stages run separately add to the row of their N)."""
  path = os.path.join("bench", "results", f"{_NAME.value}.json")
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return {row["blocks"]: row for row in json.load(f)["rows"]}


def _save(n: int, result: dict) -> None:
  rows = _load_rows()
  rows.setdefault(n, {"blocks": n}).update(result)
  ordered = [rows[k] for k in sorted(rows)]
  bench_utils.write_results(_NAME.value, ordered, _markdown(ordered))


def _markdown(rows) -> str:
  gib = lambda b: f"{b / 2**30:.2f}" if isinstance(b, (int, float)) else b
  columns = ["blocks", "write_corpus_s", "corpus_bytes_per_block", "open_s",
             "open_bytes_per_block", "featurize_blocks_per_s", "index_build_publish_s",
             "index_peak_rss", "index_peak_over_embeddings", "index_bytes_per_block",
             "swap_load_s", "search1_p50_ms", "search1_p99_ms", "search512_p50_ms",
             "recall10_vs_exact", "pretrain_peak_rss", "finetune_peak_rss", "serve_p50_ms",
             "serve_peak_rss"]
  shown = [{c: (gib(r.get(c, "")) if c.endswith("rss") else r.get(c, "")) for c in columns}
           for r in rows]
  return bench_utils.markdown_table(shown, columns)


if __name__ == "__main__":
  app.run(main)
