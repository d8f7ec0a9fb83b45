"""`run_experiment`: the one entry point of every training job (after Model Garden's
`train_lib.run_experiment`): strategy, the final config in `model_dir/experiment.json`, the
task's run."""
import os
from typing import Dict

import tensorflow as tf

from realm_tf import errors
from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.experiments.config import ExperimentConfig
from realm_tf.experiments.config import IctTaskConfig
from realm_tf.experiments.config import OpenQATaskConfig
from realm_tf.experiments.config import PretrainTaskConfig
from realm_tf.experiments.ict_task import IctTask
from realm_tf.experiments.open_qa_task import OpenQATask
from realm_tf.experiments.pretrain_task import PretrainTask
from realm_tf.training import distribute

EXPERIMENT_FILE = "experiment.json"
TASKS = {IctTaskConfig: IctTask, PretrainTaskConfig: PretrainTask, OpenQATaskConfig: OpenQATask}


def run_experiment(config: ExperimentConfig) -> Dict[str, float]:
  """Trains the task of `config` (resuming from `trainer.model_dir`); returns its final
  metrics. Call it before any other TensorFlow op of the process: the runtime's CPU split and
  multi-worker strategy configure TensorFlow first."""
  model_dir = config.trainer.model_dir
  if not model_dir:
    raise errors.InputError(errors.describe(
        "trainer.model_dir", "not set", "Set it (--params_override=trainer.model_dir=...)"))
  runtime = config.runtime
  if runtime.num_cpu_devices:
    distribute.split_cpu(runtime.num_cpu_devices)
  strategy = distribute.build_strategy(runtime.strategy, runtime.tpu)
  output = distribute.output_dir(strategy, model_dir)
  tf.io.gfile.makedirs(output)
  overrides.write_file(config, os.path.join(output, EXPERIMENT_FILE),
                       experiment=registry.name_of(config))
  return TASKS[type(config.task)](config, strategy).run()
