"""`realm-finetune`: Open-QA fine-tuning of a pre-trained REALM (see `qa/finetune_lib.py`).

    python -m realm_tf.finetune --model_dir=/tmp/qa/model --corpus=/data/blocks \\
        --train_data=pyserini:nq-dev --dev_data=dev.jsonl \\
        --encoder=minilm_l6 --init_checkpoint=/tmp/realm

A restarted job resumes from the latest checkpoint in --model_dir. The flags set the
`open_qa` experiment (`realm_tf.experiments`; `realm-train --experiment=open_qa`).
"""
from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import data
from realm_tf.flag_groups import index
from realm_tf.flag_groups import init
from realm_tf.flag_groups import lengths
from realm_tf.flag_groups import model
from realm_tf.flag_groups import open_qa
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import pretraining
from realm_tf.flag_groups import runtime
from realm_tf.flag_groups import trainer
from realm_tf.flag_groups.config_flags import ConfigFlags

CONFIG = ConfigFlags.for_experiment("open_qa")
data.define_data_flags(CONFIG, questions=True)
model.define_model_flags(CONFIG, open_qa=True)
init.define_init_flags(CONFIG, released_realm=True, open_qa=True)
lengths.define_length_flags(CONFIG, reader_length=True)
open_qa.define_open_qa_flags(CONFIG)
index.define_index_flags(CONFIG, open_qa=True)
trainer.define_trainer_flags(CONFIG, open_qa=True)
runtime.define_runtime_flags(CONFIG)
for group in (cli, data, index, init, lengths, model, open_qa, paths, pretraining, runtime,
              trainer):
  flags.adopt_module_key_flags(group)  # their flags in --help


def main(argv):
  del argv
  result = CONFIG.run_experiment()
  print(f"trained to step {int(result['step'])}; best dev exact match "
        f"{result['best_exact_match']:.4f}")


def run():
  cli.run("realm-finetune", main)


if __name__ == "__main__":
  run()
