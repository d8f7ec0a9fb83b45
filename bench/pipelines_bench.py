r"""Throughput of the corpus pipelines on the real dump, per worker and on DirectRunner.

    .venv/bin/python bench/pipelines_bench.py            # everything, ~8 min on 2 cores
    .venv/bin/python bench/pipelines_bench.py --stages=stages --embed_blocks=128

On gensim 4.4.0's 107-article English Wikipedia dump: each stage in one process (= one Beam
worker thread: dump reading, wikitext cleaning, split + tokenize + pack, the spaCy tagger,
MiniLM doc embedding), each pipeline end to end on DirectRunner with 1 and 2 worker processes
(the index builder with a tiny doc embedder, `--runner_embedder=minilm` for MiniLM, so that
its row measures the pipeline), and an extrapolation to REALM's 13,353,718 blocks on N
workers. Writes bench/results/pipelines.{md,json}; the figures depend on the machine and its
load.
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import logging  # pylint: disable=g-import-not-at-top,wrong-import-position
import apache_beam as beam  # pylint: disable=g-import-not-at-top,wrong-import-position
import importlib.util  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from pipelines import beam_runner  # pylint: disable=g-import-not-at-top,wrong-import-position
from pipelines import block_packer  # pylint: disable=wrong-import-position
from pipelines import build_index_lib  # pylint: disable=wrong-import-position
from pipelines import dump_reader  # pylint: disable=wrong-import-position
from pipelines import pretraining_examples_lib  # pylint: disable=wrong-import-position
from pipelines import salient_span_tagger  # pylint: disable=wrong-import-position
from pipelines import wikipedia_to_blocks_lib  # pylint: disable=wrong-import-position
from pipelines import wikitext_cleaner  # pylint: disable=wrong-import-position
from realm_tf import configs  # pylint: disable=wrong-import-position
from realm_tf import pretrained  # pylint: disable=wrong-import-position
from realm_tf.signatures.doc_embedder import DocEmbedder  # pylint: disable=wrong-import-position
from realm_tf.signatures.doc_embedder import export_doc_embedder  # pylint: disable=C0413
from realm_tf.tokenization import sentence_splitter  # pylint: disable=wrong-import-position

_STAGES = flags.DEFINE_list("stages", ["stages", "runners"],
                            "What to run: 'stages' (per worker) and/or 'runners' (DirectRunner).")
_EMBED_BLOCKS = flags.DEFINE_integer("embed_blocks", 64,
                                     "Blocks embedded for the per-worker embedding rate.")
_WORKERS = flags.DEFINE_list("workers", ["1", "2"], "DirectRunner worker counts to compare.")
_RUNNER_EMBEDDER = flags.DEFINE_enum("runner_embedder", "tiny", ["tiny", "minilm"],
                                     "Doc embedder of the DirectRunner index-builder runs.")
_DATAFLOW_WORKERS = flags.DEFINE_list("dataflow_workers", ["10", "50", "200"],
                                      "Worker counts for the full-Wikipedia extrapolation.")
_VCPUS = flags.DEFINE_integer("vcpus_per_worker", 8, "vCPUs per Dataflow worker (n2-standard-8).")

FULL_WIKIPEDIA_BLOCKS = 13_353_718  # REALM's English Wikipedia blocks
GENSIM_DUMP = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def real_dump() -> str:
  spec = importlib.util.find_spec("gensim")
  if spec is None:
    raise SystemExit("pip install --no-deps gensim==4.4.0 (its test data is the dump)")
  return os.path.join(spec.submodule_search_locations[0], "test", "test_data", GENSIM_DUMP)


def timed(fn):
  start = time.perf_counter()
  result = fn()
  return result, time.perf_counter() - start


def bench_stages(dump: str, embed_blocks: int):
  """Per-worker rates of each stage.

  Returns:
    (rows of (stage, rate, note), per-core blocks/s of each pipeline for the extrapolation).
  """
  rows, spent = [], {}
  with open(dump, "rb") as f:
    pages, seconds = timed(lambda: list(dump_reader.iter_dump_file(dump, f)))
  spent["read"] = seconds
  megabytes = sum(p.text_bytes for p in pages) / 1e6
  rows.append(("read dump (bz2 + XML)", f"{len(pages) / seconds:,.0f} pages/s",
               f"{megabytes / seconds:.1f} MB wikitext/s"))
  articles = [p for p in pages if p.redirect is None and p.namespace == 0 and
              not wikitext_cleaner.is_disambiguation(p.title, p.text)]

  def clean_all():
    out = []
    for page in articles:
      try:
        out.append((page.title, wikitext_cleaner.clean_wikitext(page.text)))
      except wikitext_cleaner.MalformedWikitextError:
        pass
    return [d for d in out if d[1]]

  documents, seconds = timed(clean_all)
  spent["clean"] = seconds
  rows.append(("clean wikitext (mwparserfromhell)", f"{len(articles) / seconds:,.1f} pages/s",
               f"{sum(len(p.text) for p in articles) / seconds / 1e6:.2f} MB/s"))
  unclosed = "\n".join(f"Fact {i}.<ref>cite web {i}" for i in range(10_000))
  _, seconds = timed(lambda: wikitext_cleaner.clean_wikitext(unclosed))
  rows.append(("clean a page of 10k unclosed <ref>s", f"{seconds:.2f} s",
               f"{len(unclosed) / 1e6:.2f} MB of wikitext"))
  packer = block_packer.BlockPacker(pretrained.minilm_tokenizer())
  packer.pack(documents[:2])  # warm-up (tokenizer ops)

  def pack_all():
    return [b for i in range(0, len(documents), 16) for bs in packer.pack(documents[i:i + 16])
            for b in bs]

  blocks, seconds = timed(pack_all)
  spent["pack"] = seconds
  rows.append(("split + tokenize + pack", f"{len(blocks) / seconds:,.0f} blocks/s",
               f"{len(documents) / seconds:,.0f} articles/s"))
  sentences = [b.text[s:e] for b in blocks for s, e in sentence_splitter.split_sentences(b.text)]
  tagger = salient_span_tagger.load_tagger("spacy")
  tagger.setup()
  tagger(sentences[:100])
  sample = sentences[:4000]
  _, seconds = timed(lambda: tagger(sample))
  tokens = sum(len(s.split()) for s in sample)
  tokens_per_block = sum(len(b.text.split()) for b in blocks) / len(blocks)
  spent["tag"] = seconds
  rows.append(("tagger (spaCy sm NER + date regex)", f"{tokens / seconds:,.0f} tokens/s",
               f"{len(sample) / seconds:,.0f} sentences/s"))
  with tempfile.TemporaryDirectory() as tmp:
    tokenizer = pretrained.minilm_tokenizer()
    export_doc_embedder(pretrained.minilm_retriever(), tmp, tokenizer.cls_id, tokenizer.sep_id,
                        tokenizer.pad_id)
    embedder = DocEmbedder(tmp)
    chosen = blocks[:embed_blocks]
    ragged = lambda rows_: tf.ragged.constant([r.tolist() for r in rows_], tf.int64)
    titles, bodies = ragged([b.title_ids for b in chosen]), ragged([b.body_ids for b in chosen])
    embedder.embed_blocks(titles[:8], bodies[:8])

    def embed():
      for i in range(0, len(chosen), 64):
        embedder.embed_blocks(titles[i:i + 64], bodies[i:i + 64])

    _, seconds = timed(embed)
  rows.append(("embed (MiniLM-L6 doc tower, CPU, batch 64)",
               f"{len(chosen) / seconds:,.1f} blocks/s", f"{len(chosen)} blocks"))
  per_core = {
      "1 wikipedia_to_blocks (read + clean + pack)":
          len(blocks) / (spent["read"] + spent["clean"] + spent["pack"]),
      "2 pretraining_examples (spaCy tagger)": tokens / (spent["tag"] * tokens_per_block),
      "3 build_index (MiniLM-L6 on CPU)": len(chosen) / seconds,
  }
  return rows, per_core


def bench_runners(dump: str, worker_counts, runner_embedder: str):
  """Each pipeline end to end with DirectRunner; returns rows (pipeline, workers, s, rates)."""
  rows = []
  tokenizer = pretrained.minilm_tokenizer()
  if runner_embedder == "minilm":
    retriever = pretrained.minilm_retriever()
  else:
    retriever = configs.build_retriever(configs.RetrieverConfig(
        encoder=configs.EncoderConfig.tiny(vocab_size=tokenizer.vocab_size)))
    retriever.build()
  with tempfile.TemporaryDirectory() as tmp:
    embedder = export_doc_embedder(retriever, os.path.join(tmp, "emb"), tokenizer.cls_id,
                                   tokenizer.sep_id, tokenizer.pad_id, snapshot_step=1)
    for workers in worker_counts:
      options = (f"--direct_num_workers={workers} --direct_running_mode=multi_processing")
      corpus = os.path.join(tmp, f"corpus{workers}")
      counters, seconds = timed(lambda: wikipedia_to_blocks_lib.run_pipeline(
          beam.Pipeline(options=beam_runner.pipeline_options(options)),
          wikipedia_to_blocks_lib.BlocksConfig([dump], corpus)))
      rows.append(("1 wikipedia_to_blocks", workers, seconds,
                   f"{counters['pages_read'] / seconds:,.1f} pages/s, "
                   f"{counters['blocks'] / seconds:,.1f} blocks/s"))
      counters, seconds = timed(lambda: pretraining_examples_lib.run_pipeline(
          beam.Pipeline(options=beam_runner.pipeline_options(options)),
          pretraining_examples_lib.ExamplesConfig(corpus, os.path.join(tmp, f"ex{workers}"))))
      rows.append(("2 pretraining_examples (spaCy)", workers, seconds,
                   f"{counters['blocks_read'] / seconds:,.1f} blocks/s, "
                   f"{counters['examples'] / seconds:,.0f} examples/s"))
      build, seconds = timed(lambda: build_index_lib.build_index(
          corpus, embedder, os.path.join(tmp, f"index{workers}"), kind="scann",
          pipeline_options=options))
      rows.append((f"3 build_index ({runner_embedder} embedder, ScaNN)", workers, seconds,
                   f"{build.num_blocks / seconds:,.1f} blocks/s"))
  return rows


def main(argv):
  del argv
  print(bench_utils.machine_line(), flush=True)
  logging.set_verbosity(logging.WARNING)
  dump = real_dump()
  per_core, lines, results = {}, [], []
  if "stages" in _STAGES.value:
    rows, per_core = bench_stages(dump, _EMBED_BLOCKS.value)
    lines += ["Per worker (one process):", "", "| stage | rate | also |", "|---|---|---|"]
    lines += [f"| {stage} | {rate} | {note} |" for stage, rate, note in rows]
    results += [{"stage": stage, "rate": rate, "also": note} for stage, rate, note in rows]
  if "runners" in _STAGES.value:
    rows = bench_runners(dump, [int(w) for w in _WORKERS.value], _RUNNER_EMBEDDER.value)
    lines += ["", "DirectRunner (multi_processing), whole pipeline on the 107-article dump, "
              "startup included:", "", "| pipeline | workers | seconds | throughput |",
              "|---|---|---|---|"]
    lines += [f"| {name} | {w} | {seconds:.1f} | {rate} |" for name, w, seconds, rate in rows]
    results += [{"pipeline": name, "workers": w, "seconds": seconds, "throughput": rate}
                for name, w, seconds, rate in rows]
  if per_core:
    lines += ["", f"Full English Wikipedia ({FULL_WIKIPEDIA_BLOCKS:,} blocks): hours on N "
              f"workers of {_VCPUS.value} vCPUs at the per-core rates above, scaling linearly:",
              "", "| pipeline | blocks/s per core | " +
              " | ".join(f"N={n}" for n in _DATAFLOW_WORKERS.value) + " |",
              "|---|---|" + "---|" * len(_DATAFLOW_WORKERS.value)]
    for stage, rate in per_core.items():
      hours = [FULL_WIKIPEDIA_BLOCKS / (rate * _VCPUS.value * int(n)) / 3600
               for n in _DATAFLOW_WORKERS.value]
      lines.append(f"| {stage} | {rate:,.1f} | " + " | ".join(f"{h:.2f}" for h in hours) + " |")
      results.append({"extrapolated": stage, "blocks_per_s_per_core": rate,
                      "hours": dict(zip(_DATAFLOW_WORKERS.value, hours))})
  markdown = "\n".join(lines) + "\n"
  print(markdown)
  print("wrote", bench_utils.write_results("pipelines", results, markdown))


if __name__ == "__main__":
  app.run(main)
