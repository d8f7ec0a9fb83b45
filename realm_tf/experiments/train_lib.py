"""`run_experiment`: the one entry point of every training job (after Model Garden's
`train_lib.run_experiment`): the runtime's strategy, then the task's run (which writes the
final config to `model_dir/experiment.json`)."""
from typing import Dict

from realm_tf import distribute
from realm_tf.experiment_config import ClassificationTaskConfig
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import IctTaskConfig
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.experiment_config import PretrainTaskConfig
from realm_tf.experiments.classification_task import ClassificationTask
from realm_tf.experiments.ict_task import IctTask
from realm_tf.experiments.open_qa_task import OpenQATask
from realm_tf.experiments.pretrain_task import PretrainTask

TASKS = {IctTaskConfig: IctTask, PretrainTaskConfig: PretrainTask, OpenQATaskConfig: OpenQATask,
         ClassificationTaskConfig: ClassificationTask}


def run_experiment(config: ExperimentConfig, **options) -> Dict[str, float]:
  """Trains the task of `config` (resuming from `trainer.model_dir`); returns its final
  metrics. `options`: the task's `verbose` and `monitor` (`base_task.Task`). Call it before
  any other TensorFlow op of the process: the runtime's CPU split and multi-worker strategy
  configure TensorFlow first."""
  runtime = config.runtime
  if runtime.num_cpu_devices:
    distribute.split_cpu(runtime.num_cpu_devices)
  strategy = distribute.build_strategy(runtime.strategy, runtime.tpu)
  return TASKS[type(config.task)](config, strategy, **options).run()
