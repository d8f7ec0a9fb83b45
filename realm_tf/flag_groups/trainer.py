"""The training loop's flags, onto `trainer` (`experiment_config.TrainerConfig`): the run's
directory, steps, batch, learning rates and the checkpoint, evaluation and log cadences."""
from typing import Optional

from absl import flags

from realm_tf.flag_groups import paths
from realm_tf.flag_groups.config_flags import ConfigFlags


def batch_size(help_text: str, default: Optional[int] = None) -> flags.FlagHolder:
  """`--batch_size`: a training step's global batch, or `realm-evaluate`'s questions per batch."""
  return flags.DEFINE_integer("batch_size", default, help_text, lower_bound=1)


def define_trainer_flags(config: ConfigFlags, open_qa: bool = False) -> None:
  """Binds `--model_dir`, `--num_steps`, `--batch_size`, `--learning_rate`,
  `--checkpoint_every`, `--keep_checkpoints`, `--eval_every` and `--eval_max_examples` to
  `trainer.<flag>`; `open_qa` adds `--retriever_learning_rate`, `--warmup_steps`,
  `--log_every` and fine-tuning's earlier flag names."""
  config.bind(paths.model_dir("The run's directory: checkpoints, summaries, experiment.json and "
                              "what the stage writes (a restarted run resumes from it).",
                              required=True), "trainer.model_dir", show_default=False)
  config.bind(flags.DEFINE_integer("num_steps", None, "Training steps (fine-tuning: 0 writes "
                                   "the initialisation as a QA model).", lower_bound=0),
              "trainer.num_steps")
  config.bind(batch_size("Global batch, across replicas (ICT: the in-batch negatives; "
                         "fine-tuning: questions)."), "trainer.batch_size")
  config.bind(flags.DEFINE_float("learning_rate", None, "Peak learning rate.", lower_bound=0),
              "trainer.learning_rate")
  config.bind(flags.DEFINE_integer("checkpoint_every", None, "Steps between checkpoints.",
                                   lower_bound=1), "trainer.checkpoint_every")
  config.bind(flags.DEFINE_integer("keep_checkpoints", None, "Checkpoints kept (the newest).",
                                   lower_bound=1), "trainer.keep_checkpoints")
  config.bind(flags.DEFINE_integer("eval_every", None, "Steps between --dev_data evaluations.",
                                   lower_bound=1), "trainer.eval_every")
  config.bind(flags.DEFINE_integer("eval_max_examples", None, "--dev_data questions evaluated "
                                   "(0: all).", lower_bound=0), "trainer.eval_max_examples")
  if not open_qa:
    return
  config.bind(flags.DEFINE_float("retriever_learning_rate", None, "The query tower's peak "
                                 "learning rate (default: --learning_rate).", lower_bound=0),
              "trainer.retriever_learning_rate")
  config.bind(flags.DEFINE_integer("warmup_steps", None, "Warm-up steps (default min(10000, "
                                   "max(100, steps/10))).", lower_bound=0),
              "trainer.warmup_steps")
  config.bind(flags.DEFINE_integer("log_every", None, "Steps between progress lines.",
                                   lower_bound=1), "trainer.log_every")
  config.alias(flags.DEFINE_alias("num_train_steps", "num_steps"), "num_steps")
  config.alias(flags.DEFINE_alias("eval_every_steps", "eval_every"), "eval_every")
  config.alias(flags.DEFINE_alias("checkpoint_every_steps", "checkpoint_every"),
               "checkpoint_every")
  config.alias(flags.DEFINE_alias("log_every_steps", "log_every"), "log_every")
