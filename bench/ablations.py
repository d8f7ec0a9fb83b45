"""Knowledge-world ablations: REALM Table 2 and Figure 4 with tiny BERTs, in one command.

  python bench/ablations.py                 # the full table (<= 30 min on 2 CPU cores)
  python bench/ablations.py --size=small    # the 3-minute variant `make test` runs

Writes bench/results/ablations.{md,json} and ablations_ru.png (retrieval utility vs
pre-training step); see realm_tf/knowledge_world/ablations_lib.py for what each row is.
"""
import dataclasses
import os
import sys
import time

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from realm_tf.knowledge_world import ablations_lib  # pylint: disable=wrong-import-position

_SIZE = flags.DEFINE_enum("size", "full", ["full", "small"], "Preset.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "/tmp/realm_ablations",
                                  "Working directory (world, models); replaced.")
_RESULTS_DIR = flags.DEFINE_string("results_dir", "bench/results", "Where results go.")
_NAME = flags.DEFINE_string("name", "", "Result file name (default: ablations[_small]).")
_VARIANTS = flags.DEFINE_list("variants", [], f"Subset of {ablations_lib.VARIANTS}.")
_SEED = flags.DEFINE_integer("seed", None, "Override the preset's seed.")
_NUM_ENTITIES = flags.DEFINE_integer("num_entities", None, "Override the world size.")
_PRETRAIN_STEPS = flags.DEFINE_integer("pretrain_steps", None, "Override pre-training steps.")
_FINETUNE_STEPS = flags.DEFINE_integer("finetune_steps", None, "Override fine-tuning steps.")


def main(argv):
  del argv
  preset = (ablations_lib.full_config if _SIZE.value == "full" else
            ablations_lib.small_config)
  config = preset(_OUTPUT_DIR.value)
  overrides = {}
  if _VARIANTS.value:
    overrides["variants"] = tuple(_VARIANTS.value)
  if _SEED.value is not None:
    overrides["seed"] = _SEED.value
    overrides["world"] = dataclasses.replace(config.world, seed=_SEED.value)
  if _NUM_ENTITIES.value is not None:
    overrides["world"] = dataclasses.replace(overrides.get("world", config.world),
                                             num_entities=_NUM_ENTITIES.value)
  if _PRETRAIN_STEPS.value is not None:
    overrides["pretrain_steps"] = _PRETRAIN_STEPS.value
  if _FINETUNE_STEPS.value is not None:
    overrides["finetune_steps"] = _FINETUNE_STEPS.value
  config = dataclasses.replace(config, **overrides)
  started = time.perf_counter()
  result = ablations_lib.run_ablations(config, log=lambda m: print(m, flush=True))
  command = "python bench/ablations.py " + " ".join(sys.argv[1:])
  paths = ablations_lib.write_report(
      result, config, _RESULTS_DIR.value, command.strip(),
      _NAME.value or ("ablations" if _SIZE.value == "full" else "ablations_small"))
  with open(paths["markdown"], encoding="utf-8") as f:
    print(f.read())
  print(f"total {(time.perf_counter() - started) / 60:.1f} min; wrote " +
        ", ".join(paths.values()))


if __name__ == "__main__":
  app.run(main)
