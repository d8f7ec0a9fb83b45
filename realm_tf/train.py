"""`realm-train`: runs a registered experiment (ICT, pre-training, Open-QA, classification).

  realm-train --experiment=ict --params_override=trainer.model_dir=runs/ict,task.corpus=corpus
  realm-train --experiment=open_qa --config_file=runs/qa/experiment.json \\
      --params_override=trainer.num_steps=20000

The config is the experiment's registered defaults (`realm_tf.experiments.registry`), then
--config_file (JSON, e.g. a run's experiment.json), then --params_override; the final config is
written to `<trainer.model_dir>/experiment.json`. A restarted job resumes from its checkpoints.
"""
import json

from absl import flags

from realm_tf import cli
from realm_tf.experiments import registered_defaults

_EXPERIMENT = flags.DEFINE_enum("experiment", None, tuple(registered_defaults.DEFAULTS),
                                "The task to train.", required=True)
_CONFIG_FILE = flags.DEFINE_string("config_file", "", "JSON settings over the defaults.")
_PARAMS_OVERRIDE = flags.DEFINE_string(
    "params_override", "", "Settings over --config_file: "
    "'trainer.num_steps=10,task.model.encoder=tiny' (dotted keys of the experiment config).")
_MODE = flags.DEFINE_enum("mode", "train", ("train", "print_config"),
                          "train; print_config: print the final config and exit.")


def experiment_config():
  """The `ExperimentConfig` the parsed flags ask for."""
  from realm_tf.experiments import registry  # pylint: disable=g-import-not-at-top
  return registry.build(_EXPERIMENT.value, _CONFIG_FILE.value, _PARAMS_OVERRIDE.value)


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.experiments import overrides
  from realm_tf.experiments.train_lib import run_experiment
  config = experiment_config()
  if _MODE.value == "print_config":
    print(json.dumps(dict(experiment=_EXPERIMENT.value, **overrides.to_dict(config)), indent=2))
    return
  metrics = run_experiment(config)
  print({k: round(v, 4) for k, v in metrics.items()})


def run():
  cli.run("realm-train", main)


if __name__ == "__main__":
  run()
