"""`ConfigFlags`: a binary's flags onto the settings of its config, with no defaults of their own.

    config = ConfigFlags.for_experiment("ict")
    config.bind(flags.DEFINE_integer("num_steps", None, "Training steps."), "trainer.num_steps")
    ...
    metrics = config.run_experiment()  # in main, after parsing

A bound flag defaults to None: left out, the config's own value stands, so the registered
experiment (`experiments.registry` and the config dataclasses) is the only place a default
lives. `--help` still shows it: a bound flag's displayed default (absl's `default_as_str`) is
the config's value, read from `experiments.registered_defaults` (the registry as plain values,
without the TensorFlow its config classes import). A flag bound to several settings, or to one
a preset decides (`--dropout`: the encoder's), shows none.
"""
from typing import Any, Dict, Mapping, Optional, Tuple

from absl import flags

from realm_tf.experiments import registered_defaults


def _as_str(flag: flags.Flag, value: Any) -> str:
  """`value` as absl prints a default (`Flag.default_as_str`: "'1000'", "'true'", "'a,b'")."""
  if flag.serializer:
    return repr(flag.serializer.serialize(value))
  if flag.boolean:
    return repr("true" if value else "false")
  return repr(str(value))


class ConfigFlags:
  """The flags of one binary and the settings (dotted keys of its config) each one sets."""

  def __init__(self, defaults: Mapping[str, Any], experiment: Optional[str] = None):
    """`defaults`: {setting: the config's value} for `--help`; `experiment`: the registered
    experiment the flags set (`for_experiment`)."""
    self._defaults = defaults
    self._experiment = experiment
    self.settings: Dict[str, Tuple[str, ...]] = {}

  @classmethod
  def for_experiment(cls, name: str) -> "ConfigFlags":
    """The flags of a binary that runs registered experiment `name`."""
    return cls(registered_defaults.DEFAULTS[name], name)

  def experiment_config(self):
    """The `ExperimentConfig` the parsed flags ask for: the registered experiment with the
    settings of the flags passed."""
    # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
    from realm_tf.experiments import overrides
    from realm_tf.experiments import registry
    return overrides.from_flags(registry.get(self._experiment), self.settings)

  def run_experiment(self) -> Dict[str, float]:
    """Trains `experiment_config()` (`experiments.train_lib.run_experiment`); its metrics."""
    from realm_tf.experiments.train_lib import run_experiment  # pylint: disable=g-import-not-at-top
    return run_experiment(self.experiment_config())

  def bind(self, holder: flags.FlagHolder, *settings: str,
           show_default: bool = True) -> flags.FlagHolder:
    """`holder`'s flag sets `settings` when passed; its `--help` default is their value (not
    for a required flag: `show_default=False`)."""
    self.settings[holder.name] = settings
    flag = flags.FLAGS[holder.name]
    if show_default and flag.default is None and len(settings) == 1:
      value = self._defaults.get(settings[0])
      if value is not None:
        flag.default_as_str = _as_str(flag, value)
    return holder

  def alias(self, holder: flags.FlagHolder, name: str) -> None:
    """`holder`, an earlier name of bound flag `name` (`flags.DEFINE_alias`), shows its default."""
    flags.FLAGS[holder.name].default_as_str = flags.FLAGS[name].default_as_str
