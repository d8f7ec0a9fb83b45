"""`realm-knowledge-world`: writes a knowledge world (see `realm_tf/knowledge_world/world.py`).

    python -m realm_tf.knowledge_world.generate --output_dir=/tmp/world --num_entities=120

The directory then feeds every stage unchanged: `realm-ict --corpus_dir`, `realm-pretrain
--corpus_dir --examples_dir --vocab_file`, `realm-finetune --corpus --train_data --dev_data
--vocab_file` and `realm-evaluate --data`.
"""
import dataclasses
import json

from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import runtime

_OUTPUT_DIR = paths.output_dir("Where the world is written.", required=True)
_NUM_ENTITIES = flags.DEFINE_integer("num_entities", 120, "People in the world.", lower_bound=4)
_DOCS = flags.DEFINE_integer("docs_per_entity", 2, "Z documents per person (1..4).",
                             lower_bound=1, upper_bound=4)
_PLACES = flags.DEFINE_integer("num_places", 0, "Towns (0: as many as people).", lower_bound=0)
_X = flags.DEFINE_integer("x_sentences_per_fact", 2, "X sentences per salient fact (1..4).",
                          lower_bound=1, upper_bound=4)
_DEV = flags.DEFINE_float("dev_fraction", 0.1, "Fraction of the questions in dev.",
                          lower_bound=0, upper_bound=1)
_TEST = flags.DEFINE_float("test_fraction", 0.2, "Fraction of the questions in test.",
                           lower_bound=0, upper_bound=1)
_SEED = runtime.seed(0)
for group in (paths, runtime):
  flags.adopt_module_key_flags(group)  # their flags in --help

flags.register_multi_flags_validator(
    ["dev_fraction", "test_fraction"],
    lambda f: f["test_fraction"] > 0 and f["dev_fraction"] + f["test_fraction"] < 1,
    "--test_fraction must be > 0 and --dev_fraction + --test_fraction < 1")


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.data import shards
  from realm_tf.knowledge_world.world import WorldConfig
  from realm_tf.knowledge_world.writer import write_world
  shards.check_output_directory(_OUTPUT_DIR.value, "--output_dir")
  files = write_world(_OUTPUT_DIR.value, WorldConfig(
      num_entities=_NUM_ENTITIES.value, docs_per_entity=_DOCS.value,
      num_places=_PLACES.value, x_sentences_per_fact=_X.value, dev_fraction=_DEV.value,
      test_fraction=_TEST.value, seed=_SEED.value))
  print(json.dumps(dataclasses.asdict(files), indent=2))


def run():
  cli.run("realm-knowledge-world", main)


if __name__ == "__main__":
  run()
