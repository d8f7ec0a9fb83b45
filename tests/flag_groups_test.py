"""Defaults once, each flag once: a binary run with no config flags builds exactly its registered
experiment, `--help` shows the registered values, and every flag name is defined in one module
of realm_tf/ and pipelines/ (`realm_tf.flag_groups`)."""
import ast
import collections
import json
import os
import subprocess
import sys

from absl import flags
import pytest

from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.flag_groups.config_flags import ConfigFlags
from realm_tf.training.run_config import flatten

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gen_registered_defaults  # pylint: disable=g-import-not-at-top,wrong-import-position

# (binary module, its experiment, the required flags, the settings they set)
BINARIES = [
    ("realm_tf.ict", "ict", "--corpus=c --model_dir=m",
     {"task.corpus": "c", "trainer.model_dir": "m"}),
    ("realm_tf.pretrain", "pretrain", "--corpus=c --examples_dir=e --model_dir=m",
     {"task.corpus": "c", "task.examples_dir": "e", "trainer.model_dir": "m"}),
    ("realm_tf.finetune", "open_qa", "--corpus=c --train_data=t --model_dir=m",
     {"task.corpus": "c", "task.train_data": "t", "trainer.model_dir": "m"}),
] + [("realm_tf.train", name, f"--experiment={name}", {}) for name in registry.NAMES]

# Parses each argv in turn (every flag back at its default first) in the binary's process and
# prints, a line each, the config it would run, with its flags' settings and the defaults its
# --help shows, parsed back by each flag's parser. One process per binary, not per argv: each
# process pays for importing TensorFlow (the registry's config classes import it).
_BUILD = """
import ast, json, sys
from absl import flags
from realm_tf.experiments import overrides
module = __import__(sys.argv[1], fromlist=["CONFIG"])
for argv in sys.argv[2:]:
  flags.FLAGS.unparse_flags()
  flags.FLAGS(["binary"] + argv.split())
  bound = getattr(module, "CONFIG", None)  # realm-train has none: its own experiment_config
  settings = bound.settings if bound else {}
  shown = {name: flags.FLAGS[name].parser.parse(
               ast.literal_eval(flags.FLAGS[name].default_as_str))
           for name in settings if flags.FLAGS[name].default_as_str is not None}
  print(json.dumps({"config": overrides.to_dict((bound or module).experiment_config()),
                    "settings": settings, "shown": shown}, default=list))
"""


@pytest.fixture(scope="module")
def built():
  """{(module, argv): what `_BUILD` printed}, the binaries' processes run side by side."""
  argvs = collections.defaultdict(list)
  for module, _, argv, _ in BINARIES:
    argvs[module].append(argv)
  runs = {module: subprocess.Popen([sys.executable, "-c", _BUILD, module, *module_argvs],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   cwd=ROOT)
          for module, module_argvs in argvs.items()}
  results = {}
  for module, process in runs.items():
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stderr[-3000:]
    lines = stdout.strip().splitlines()[-len(argvs[module]):]
    results.update({(module, argv): json.loads(line)
                    for argv, line in zip(argvs[module], lines)})
  return results


@pytest.mark.parametrize("module,name,argv,required", BINARIES,
                         ids=[f"{m}:{n}" for m, n, _, _ in BINARIES])
def test_a_binary_without_config_flags_builds_the_registered_experiment(
    built, module, name, argv, required):
  expected = overrides.to_dict(overrides.override(registry.get(name), required))
  assert built[module, argv]["config"] == expected


@pytest.mark.parametrize("module,name,argv", [b[:3] for b in BINARIES[:3]],
                         ids=[m for m, _, _, _ in BINARIES[:3]])
def test_each_flag_sets_a_setting_and_shows_its_registered_value(built, module, name, argv):
  result = built[module, argv]
  known = {".".join(key.split(".")[:end])  # a setting, or a group set by a preset's name
           for key in flatten(overrides.to_dict(registry.get(name)))
           for end in range(1, key.count(".") + 2)}
  registered = gen_registered_defaults.settings(name)
  for flag, settings in result["settings"].items():
    assert set(settings) <= known, (flag, settings)
  for flag, value in result["shown"].items():
    (setting,) = result["settings"][flag]
    assert value == (list(registered[setting]) if isinstance(registered[setting], tuple)
                     else registered[setting]), flag


def test_the_help_defaults_are_generated_from_the_registry():
  assert gen_registered_defaults.main(["--check"]) == 0, (
      "run: python tools/gen_registered_defaults.py")


def test_config_flags_default_to_unset_and_show_the_configs_value():
  config = ConfigFlags({"a.steps": 1000, "a.shared": True, "a.args": (), "a.none": None})
  steps = config.bind(flags.DEFINE_integer("flag_groups_test_steps", None, "."), "a.steps")
  shared = config.bind(flags.DEFINE_bool("flag_groups_test_shared", None, "."), "a.shared")
  args = config.bind(flags.DEFINE_list("flag_groups_test_args", None, "."), "a.args")
  both = config.bind(flags.DEFINE_float("flag_groups_test_both", None, "."), "a.steps",
                     "a.shared")
  none = config.bind(flags.DEFINE_float("flag_groups_test_none", None, "."), "a.none")
  required = config.bind(flags.DEFINE_integer("flag_groups_test_required", None, "."),
                         "a.steps", show_default=False)
  config.alias(flags.DEFINE_alias("flag_groups_test_earlier", "flag_groups_test_steps"),
               "flag_groups_test_steps")
  shown = {name: flags.FLAGS[name].default_as_str for name in (
      steps.name, shared.name, args.name, both.name, none.name, required.name,
      "flag_groups_test_earlier")}
  assert shown == {steps.name: "'1000'", shared.name: "'true'", args.name: "''",
                   both.name: None, none.name: None, required.name: None,
                   "flag_groups_test_earlier": "'1000'"}
  assert steps.default is None and config.settings[both.name] == ("a.steps", "a.shared")


def _defined_flags():
  """{flag name: modules of realm_tf/ and pipelines/ with a `flags.DEFINE_*` of it}; a
  definition whose name is not a string literal is reported as name None."""
  defined = collections.defaultdict(set)
  for top in ("realm_tf", "pipelines"):
    for directory, _, files in os.walk(os.path.join(ROOT, top)):
      for file in (f for f in files if f.endswith(".py")):
        path = os.path.join(directory, file)
        with open(path, encoding="utf-8") as f:
          tree = ast.parse(f.read())
        for node in ast.walk(tree):
          if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr.startswith("DEFINE_")
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "flags"):
            name = node.args[0] if node.args else None
            literal = isinstance(name, ast.Constant) and isinstance(name.value, str)
            defined[name.value if literal else None].add(os.path.relpath(path, ROOT))
  return defined


def test_every_flag_name_is_defined_in_one_module():
  defined = _defined_flags()
  assert None not in defined, f"flag names that are not literals: {defined.get(None)}"
  assert {"model_dir", "corpus", "block_length", "seed", "num_steps"} <= set(defined)
  assert {name: sorted(modules) for name, modules in defined.items() if len(modules) > 1} == {}
