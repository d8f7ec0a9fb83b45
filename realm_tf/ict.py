"""`realm-ict`: ICT warm-start of the retriever over a block corpus.

  realm-ict --corpus=corpus --model_dir=runs/ict --encoder=minilm_l6 --init_weights=minilm

The flags set the `ict` experiment (`realm_tf.experiments`; `realm-train --experiment=ict`).
"""
from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import data
from realm_tf.flag_groups import init
from realm_tf.flag_groups import lengths
from realm_tf.flag_groups import model
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import runtime
from realm_tf.flag_groups import trainer
from realm_tf.flag_groups.config_flags import ConfigFlags

CONFIG = ConfigFlags.for_experiment("ict")
data.define_data_flags(CONFIG, corpus_dir_alias=True)
model.define_model_flags(CONFIG)
init.define_init_flags(CONFIG)
lengths.define_length_flags(CONFIG)
trainer.define_trainer_flags(CONFIG)
runtime.define_runtime_flags(CONFIG)
CONFIG.bind(flags.DEFINE_float("remove_prob", None, "Probability of removing the query from its "
                               "block.", lower_bound=0, upper_bound=1), "task.remove_prob")
for group in (data, init, lengths, model, paths, runtime, trainer):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  del argv
  metrics = CONFIG.run_experiment()
  print({k: round(v, 4) for k, v in metrics.items()})


def run():
  cli.run("realm-ict", main)


if __name__ == "__main__":
  run()
