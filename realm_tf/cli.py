"""The command-line front of every `realm-*` binary and pipeline: one runner, one vocabulary.

`run(name, main)` is each binary's entry point:
  * `--help` prints the binary's module docstring and its own flags, before TensorFlow is
    imported (binaries import TensorFlow inside `main`, after flag parsing);
  * GPU memory grows as needed (`realm_tf.devices`); TensorFlow's C++ logging is quiet
    unless the user sets `TF_CPP_MIN_LOG_LEVEL` or passes `--verbosity=1` or higher;
  * bad input ends as one line `<name>: <message>` and exit status 2 (`realm_tf.errors`;
    the index settings named by their flags, `in_flag_names`), a flag outside its domain too
    (every numeric flag has bounds; a few flag pairs have validators).

The choices below are the flag vocabulary shared by the binaries (the libraries validate the
same values; `tests/cli_test.py` keeps both in step). README's "Command line" table is
generated from the binaries' flags by `tools/cli_table.py`.
"""
import os
import re
import sys
from typing import Callable, Container, Dict, List, NamedTuple, Optional, Sequence

from absl import app
from absl import flags

from realm_tf import devices
from realm_tf import errors

ENCODERS = ("tiny", "minilm_l6", "bert_base")
RETRIEVER_HEADS = ("auto", "realm", "sentence")
DOC_INPUTS = ("title_body", "body")
STRATEGIES = ("default", "mirrored", "multi_worker_mirrored", "tpu")
INDEX_KINDS = ("scann", "brute_force")
MASKINGS = ("salient_span", "random_span", "random_token", "spanbert")
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")  # auto: `models.precision.best_compute_dtype`
DATASETS = ("nq", "wq", "curatedtrec")


# {setting: flag} of the index-building settings, as `realm_tf.mips.index_builder`'s errors
# name them (fields of its `ScannSettings` and `Sharding`, a task config's `scann`, `sharding`).
INDEX_SETTING_FLAGS = {
    "ScannSettings.num_leaves": "scann_num_leaves",
    "ScannSettings.num_leaves_to_search": "scann_num_leaves_to_search",
    "ScannSettings.dimensions_per_block": "scann_dimensions_per_block",
    "ScannSettings.reorder_k": "scann_reorder_k",
    "Sharding.shard_size": "index_shard_size",
}
_TASK_FIELDS = {"ScannSettings": "scann", "Sharding": "sharding"}


class IndexFlags(NamedTuple):
  """The index settings of every binary that builds an index (`define_index_flags`)."""
  num_leaves: flags.FlagHolder
  num_leaves_to_search: flags.FlagHolder
  dimensions_per_block: flags.FlagHolder
  reorder_k: flags.FlagHolder
  shard_size: flags.FlagHolder

  def scann_values(self) -> Dict[str, int]:
    """The keyword arguments of `realm_tf.mips.index_builder.ScannSettings`."""
    return {name: holder.value for name, holder in self._asdict().items()
            if name != "shard_size"}

  def sharding_values(self) -> Dict[str, int]:
    """The keyword arguments of `realm_tf.mips.index_builder.Sharding`."""
    return {"shard_size": self.shard_size.value}

  def settings(self) -> Dict[str, str]:
    """{flag name: task config setting}, e.g. {"index_shard_size": "sharding.shard_size"}."""
    return {flag: f"{_TASK_FIELDS[setting.split('.')[0]]}.{setting.split('.')[1]}"
            for setting, flag in INDEX_SETTING_FLAGS.items()}


def index_flag_args(scann, sharding) -> List[str]:
  """`ScannSettings` and `Sharding` as the flags of an index-building binary
  (`define_index_flags`), e.g. ["--scann_num_leaves=0", ..., "--index_shard_size=0"]."""
  values = {"ScannSettings": scann, "Sharding": sharding}
  return [f"--{flag}={getattr(values[setting.split('.')[0]], setting.split('.')[1])}"
          for setting, flag in INDEX_SETTING_FLAGS.items()]


def in_flag_names(message: str, defined: Optional[Container[str]] = None) -> str:
  """`message` with each setting of `INDEX_SETTING_FLAGS` whose flag is `defined` (default:
  defined in this process) written as that flag: "ScannSettings.num_leaves: 9 leaves for 4
  documents" -> "--scann_num_leaves: 9 leaves for 4 documents"."""
  defined = flags.FLAGS if defined is None else defined
  names = {setting: f"--{flag}" for setting, flag in INDEX_SETTING_FLAGS.items()
           if flag in defined}
  if not names:
    return message
  pattern = "|".join(re.escape(s) for s in sorted(names, key=len, reverse=True))
  return re.sub(rf"(?<![\w.])({pattern})(?!\w)", lambda m: names[m.group(1)], message)


def define_index_flags() -> IndexFlags:
  """Defines `--scann_num_leaves`, `--scann_num_leaves_to_search`,
  `--scann_dimensions_per_block`, `--scann_reorder_k` and `--index_shard_size`
  (`realm_tf.mips.index_builder`)."""
  return IndexFlags(
      flags.DEFINE_integer("scann_num_leaves", 0, "ScaNN tree leaves; 0: sqrt(N) from 10k "
                           "blocks (1000 for full Wikipedia, as the reference).", lower_bound=0),
      flags.DEFINE_integer("scann_num_leaves_to_search", 0, "ScaNN leaves searched per query; "
                           "0: 1/20 of the leaves (reference: 100 of 1000).", lower_bound=0),
      flags.DEFINE_integer("scann_dimensions_per_block", 2,
                           "ScaNN asymmetric-hashing dimensions per block.", lower_bound=1),
      flags.DEFINE_integer("scann_reorder_k", 100,
                           "ScaNN candidates re-scored exactly per query.", lower_bound=1),
      flags.DEFINE_integer("index_shard_size", 0, "Most rows per index shard (each shard a "
                           "ScaNN or exact index, built one at a time); 0: N/8 "
                           "within [100,000, 1,000,000].",
                           lower_bound=0))


class ReleasedFlags(NamedTuple):
  """How a released ORQA model directory is imported (`define_released_flags`)."""
  verify_blocks: flags.FlagHolder
  num_attention_heads: flags.FlagHolder

  def values(self) -> Dict[str, object]:
    """{setting: value}, keyword arguments of `realm_tf.qa.released_imports.ReleasedSettings`."""
    return {name: holder.value for name, holder in self._asdict().items()}


def define_released_flags() -> ReleasedFlags:
  """Defines `--verify_blocks` and `--released_num_attention_heads`
  (`realm_tf.qa.released_imports`)."""
  holders = ReleasedFlags(
      flags.DEFINE_string("verify_blocks", "8", "Blocks re-embedded to check that a released "
                          "model's block_emb rows pair with its blocks: a number, or all (as "
                          "long as embedding the corpus). More than its import was checked on "
                          "are checked again."),
      flags.DEFINE_integer("released_num_attention_heads", 0, "Attention heads of a released "
                           "model's towers; 0: its bert_config.json, else hidden size / 64.",
                           lower_bound=0))
  flags.register_validator(
      "verify_blocks", lambda v: v == "all" or (v.isdigit() and int(v) >= 1),
      "--verify_blocks must be a positive number of blocks or all")
  return holders


def _verbose(argv: Sequence[str]) -> bool:
  for i, arg in enumerate(argv):
    for prefix in ("--verbosity", "-v"):
      if arg == prefix and i + 1 < len(argv):
        arg = f"{prefix}={argv[i + 1]}"
      if arg.startswith(prefix + "="):
        try:
          return int(arg.split("=", 1)[1]) >= 1
        except ValueError:
          return False
  return False


def quiet_native_logging(argv: Sequence[str]) -> None:
  """Hides TensorFlow's C++ log lines unless the user asked for them."""
  if "TF_CPP_MIN_LOG_LEVEL" not in os.environ and not _verbose(argv):
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"


def run(name: str, main: Callable[[Sequence[str]], None], beam_pipeline: bool = False) -> None:
  """Runs `main` under absl with this module's help, quiet logs and the one error style.

  `beam_pipeline`: flags absl does not know (`--runner`, `--num_workers`, `--temp_location`,
  ...) stay in `main`'s argv for Beam's `PipelineOptions`, as in Beam's own examples.
  """
  module = sys.modules[main.__module__]
  quiet_native_logging(sys.argv)
  devices.grow_gpu_memory()  # a second process on the host (the index builder) needs some
  entry = sys.modules["__main__"]
  if entry is not module:  # a console script: its wrapper module is __main__
    entry.__doc__ = module.__doc__
    for flag in flags.FLAGS.get_key_flags_for_module(module.__name__):
      flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  app.run(errors.run_main(name, main, in_flag_names),
          flags_parser=lambda argv: _parse_flags(name, argv, known_only=beam_pipeline))


def _parse_flags(name: str, argv: Sequence[str], known_only: bool) -> Sequence[str]:
  """absl's parsing; a flag outside its domain (each numeric flag has one) ends as one line
  `<name>: flag --x=v: <why>`, exit 2. `known_only`: the flags absl does not define stay in
  the returned argv."""
  try:
    return flags.FLAGS(argv, known_only=known_only)
  except flags.Error as e:
    print(f"{name}: {errors.one_line(e)}. Pass --helpshort to see the flags.", file=sys.stderr,
          flush=True)
    sys.exit(errors.EXIT_BAD_INPUT)
