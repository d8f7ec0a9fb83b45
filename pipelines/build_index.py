r"""Pipeline 3, the index builder: blocks -> embeddings -> published MIPS index.

See `build_index_lib`. Local (DirectRunner), as the trainer's asynchronous refresh runs it:

    python -m pipelines.build_index --corpus_dir=/tmp/corpus \
      --embedder_dir=/tmp/snapshots/step-00001200 --index_root=/tmp/index --kind=scann

Prints the published version and directory; the index is then `load_latest(index_root)`.
"""
from absl import app
from absl import flags
from absl import logging

from pipelines import build_index_lib
from pipelines.build_index_lib import build_index  # the builder as a function, for local mode

_CORPUS_DIR = flags.DEFINE_string("corpus_dir", None, "Block shards of pipeline 1.",
                                  required=True)
_EMBEDDER_DIR = flags.DEFINE_string("embedder_dir", None, "Doc-embedder export (SavedModel).",
                                    required=True)
_INDEX_ROOT = flags.DEFINE_string("index_root", None, "Versioned index directory.",
                                  required=True)
_KIND = flags.DEFINE_enum("kind", "scann", list(build_index_lib.KINDS),
                          "ScaNN (approximate) or brute force (exact).")
_VERSION = flags.DEFINE_string("version", "",
                               "Version to publish; empty: step-<export's snapshot step>.")
_EMBEDDINGS_DIR = flags.DEFINE_string("embeddings_dir", "",
                                      "Keep the embedding shards here; empty: temporary.")
_NUM_SHARDS = flags.DEFINE_integer("num_shards", 0,
                                   "Embedding shards; 0: one per 100k blocks.")
_BLOCKS_PER_BATCH = flags.DEFINE_integer("blocks_per_batch", 128, "Blocks per embedder call.")
_PIPELINE_OPTIONS = flags.DEFINE_string("pipeline_options", "",
                                        "Beam pipeline options, passed through.")


def main(argv):
  del argv
  result = build_index(
      _CORPUS_DIR.value, _EMBEDDER_DIR.value, _INDEX_ROOT.value, kind=_KIND.value,
      version=_VERSION.value, pipeline_options=_PIPELINE_OPTIONS.value,
      embeddings_dir=_EMBEDDINGS_DIR.value, num_shards=_NUM_SHARDS.value,
      blocks_per_batch=_BLOCKS_PER_BATCH.value)
  for name, value in sorted(result.counters.items()):
    logging.info("%s: %d", name, value)
    print(f"{name}: {value}")
  print(f"published: {result.version} ({result.num_blocks} blocks) -> {result.directory}")


if __name__ == "__main__":
  app.run(main)
