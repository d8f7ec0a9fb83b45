"""`realm-pretrain`: REALM pre-training with an asynchronously refreshed MIPS index.

  realm-pretrain --corpus=corpus --examples_dir=corpus --model_dir=runs/realm \\
      --retriever_dir=runs/ict/retriever --encoder=minilm_l6 --init_weights=minilm

The flags set the `pretrain` experiment (`realm_tf.experiments`;
`realm-train --experiment=pretrain`).
"""
from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import data
from realm_tf.flag_groups import index
from realm_tf.flag_groups import init
from realm_tf.flag_groups import lengths
from realm_tf.flag_groups import model
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import pretraining
from realm_tf.flag_groups import runtime
from realm_tf.flag_groups import trainer
from realm_tf.flag_groups.config_flags import ConfigFlags

CONFIG = ConfigFlags.for_experiment("pretrain")
data.define_data_flags(CONFIG, corpus_dir_alias=True, examples=True)
model.define_model_flags(CONFIG)
init.define_init_flags(CONFIG, released_realm=True, saved_towers=True)
lengths.define_length_flags(CONFIG)
pretraining.define_pretraining_flags(CONFIG)
index.define_index_flags(CONFIG)
trainer.define_trainer_flags(CONFIG)
runtime.define_runtime_flags(CONFIG, num_cpu_devices=True)
for group in (cli, data, index, init, lengths, model, paths, pretraining, runtime, trainer):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  del argv
  metrics = CONFIG.run_experiment()
  if metrics:
    print({k: round(v, 4) for k, v in metrics.items()})


def run():
  cli.run("realm-pretrain", main)


if __name__ == "__main__":
  run()
