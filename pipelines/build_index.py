r"""Pipeline 3, the index builder: blocks -> embeddings -> published MIPS index.

See `build_index_lib`. Local (DirectRunner), as the trainer's asynchronous refresh runs it:

    python -m pipelines.build_index --corpus=/tmp/corpus \
      --embedder_dir=/tmp/snapshots/step-00001200 --index_root=/tmp/index --index_kind=scann

Prints the published version and directory; the index is then `load_latest(index_root)`.
ScaNN settings (`realm_tf.mips.index_builder`, recorded in the index manifest): by default
sqrt(N) leaves from 10k blocks, 1/20 of them searched; the reference REALM's full-Wikipedia
index is `--scann_num_leaves=1000 --scann_num_leaves_to_search=100`. A corpus of more than
`--index_shard_size` blocks (default N/8 within [100,000, 1,000,000]) is indexed in shards of
at most that many, built one at a time, each with those settings applied to its own size;
`--device=cpu` or `gpu:N` keeps it off the GPU (`realm-pretrain --builder_args=--device=cpu`).
"""
import shlex

from absl import flags
from absl import logging

from realm_tf import cli
from realm_tf import devices
from realm_tf.flag_groups import beam_pipelines
from realm_tf.flag_groups import index
from realm_tf.flag_groups import paths

_CORPUS_DIR = paths.corpus("Block shards of pipeline 1.", required=True, alias=True)
_EMBEDDER_DIR = flags.DEFINE_string("embedder_dir", None, "Doc-embedder export (SavedModel).",
                                    required=True)
_INDEX_ROOT = flags.DEFINE_string("index_root", None, "Versioned index directory.",
                                  required=True)
_KIND = index.index_kind("ScaNN (approximate) or brute force (exact).", default="scann",
                         alias=True)
_INDEX = cli.define_index_flags()
flags.adopt_module_key_flags(cli)  # the --scann_* and --index_shard_size flags in --help
_VERSION = flags.DEFINE_string("version", "",
                               "Version to publish; empty: step-<export's snapshot step>.")
_EMBEDDINGS_DIR = paths.embeddings_dir("Keep the embedding shards here; empty: temporary.")
_NUM_SHARDS = beam_pipelines.num_shards("Embedding shards; 0: one per 100k blocks.")
_BLOCKS_PER_BATCH = flags.DEFINE_integer("blocks_per_batch", 128, "Blocks per embedder call.",
                                         lower_bound=1)
_PIPELINE_OPTIONS = beam_pipelines.pipeline_options(beam_pipelines.MORE_OPTIONS_HELP)
_DEVICE = flags.DEFINE_string("device", "", devices.DEVICE_HELP)
flags.register_validator("device", devices.valid_device, "--device must be '', 'cpu' or 'gpu:N'")
for group in (beam_pipelines, cli, index, paths):
  flags.adopt_module_key_flags(group)  # their flags in --help (the --scann_* flags: cli)


def main(argv):
  devices.use_gpus(_DEVICE.value)  # before TensorFlow runs an op
  # pylint: disable=g-import-not-at-top  (TensorFlow and Beam after flag parsing)
  from pipelines.build_index_lib import build_index  # the builder as a function, for local mode
  from realm_tf.mips.index_builder import ScannSettings
  from realm_tf.mips.index_builder import Sharding
  result = build_index(
      _CORPUS_DIR.value, _EMBEDDER_DIR.value, _INDEX_ROOT.value, kind=_KIND.value,
      version=_VERSION.value,
      pipeline_options=" ".join([shlex.join(argv[1:]), _PIPELINE_OPTIONS.value]),
      embeddings_dir=_EMBEDDINGS_DIR.value, num_shards=_NUM_SHARDS.value,
      blocks_per_batch=_BLOCKS_PER_BATCH.value, scann=ScannSettings(**_INDEX.scann_values()),
      sharding=Sharding(**_INDEX.sharding_values()))
  for name, value in sorted(result.counters.items()):
    logging.info("%s: %d", name, value)
    print(f"{name}: {value}")
  print(f"published: {result.version} ({result.num_blocks} blocks) -> {result.directory}")


def run():
  cli.run("pipelines.build_index", main, beam_pipeline=True)


if __name__ == "__main__":
  run()
