"""Writes `realm_tf/experiments/registered_defaults.py`: the registered experiments as plain values.

    python tools/gen_registered_defaults.py           # rewrite it from experiments.registry
    python tools/gen_registered_defaults.py --check   # exit 1 when it is out of date

The training binaries show these values as their flags' defaults in `--help`
(`flag_groups.config_flags`), which must not import TensorFlow as the registry's config classes
do. A nested config that is an encoder preset is written as the preset's name.
"""
import json
import os
import sys
from typing import Any, Dict, List

import generated_file
from realm_tf import configs
from realm_tf import presets
from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.training.run_config import flatten

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join(ROOT, "realm_tf", "experiments", "registered_defaults.py")
HEADER = '''"""The registered experiments as plain values: the training binaries' `--help` defaults.

Written by tools/gen_registered_defaults.py from `experiments.registry`, whose config classes
import TensorFlow (`--help` does not); tests/flag_groups_test.py fails when it is out of date.
`task.model.encoder` is the encoder preset's name (the preset's own settings are left out);
the settings every experiment gives one value are written once, in `_EVERY`.
"""
'''


def _preset(encoder: configs.EncoderConfig) -> str:
  (name,) = [n for n in presets.ENCODERS
             if presets.encoder_config(n, encoder.vocab_size) == encoder]
  return name


def settings(name: str) -> Dict[str, Any]:
  """{setting: value} of registered experiment `name`, sorted by setting."""
  config = registry.get(name)
  values = {key: value for key, value in flatten(overrides.to_dict(config)).items()
            if not key.startswith("task.model.encoder.")}
  values["task.model.encoder"] = _preset(config.task.model.encoder)
  return {key: tuple(value) if isinstance(value, list) else value
          for key, value in sorted(values.items())}


def _literal(value: Any) -> str:
  """`value` as Python source, strings in double quotes."""
  if isinstance(value, str):
    return json.dumps(value)
  if isinstance(value, tuple):
    return "(" + "".join(_literal(v) + ", " for v in value).rstrip(" ") + ")"
  return repr(value)


def source() -> str:
  written = {name: [f"{_literal(key)}: {_literal(value)}," for key, value in settings(name).items()]
             for name in registry.NAMES}
  every = set.intersection(*(set(lines) for lines in written.values()))
  lines = [HEADER, "_EVERY = {"]
  lines += [f"    {line}" for line in written[registry.NAMES[0]] if line in every]
  lines += ["}", "", "DEFAULTS = {"]
  for name in registry.NAMES:
    lines += [f"    {_literal(name)}: {{", "        **_EVERY,"]
    lines += [f"        {line}" for line in written[name] if line not in every]
    lines.append("    },")
  lines.append("}")
  return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
  return generated_file.write_or_check(
      OUTPUT, source(), argv, "realm_tf/experiments/registered_defaults.py is out of date: run "
      "python tools/gen_registered_defaults.py")


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
