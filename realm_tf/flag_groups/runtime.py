"""The runtime flags of the training binaries, onto `runtime` (`experiment_config.RuntimeConfig`):
`--strategy`, `--tpu`, `--num_cpu_devices`, `--seed`, `--compute_dtype`."""
from typing import Optional

from absl import flags

from realm_tf import cli
from realm_tf.flag_groups.config_flags import ConfigFlags


def seed(default: Optional[int] = None) -> flags.FlagHolder:
  """`--seed`: the training binaries', the demo's and the knowledge world's."""
  return flags.DEFINE_integer("seed", default, "Seed of everything drawn at random "
                              "(initialisers, data order, a generated world).", lower_bound=0)


def compute_dtype(help_text: str, default: Optional[str] = None) -> flags.FlagHolder:
  """`--compute_dtype`: the training step's matmul precision, or that of the answering
  binaries' query tower and reader."""
  return flags.DEFINE_enum("compute_dtype", default, cli.COMPUTE_DTYPES, help_text)


def define_runtime_flags(config: ConfigFlags, num_cpu_devices: bool = False) -> None:
  """Binds `--strategy`, `--tpu`, `--seed`, `--compute_dtype` and, with `num_cpu_devices`,
  `--num_cpu_devices` to `runtime.<flag>`."""
  config.bind(flags.DEFINE_enum("strategy", None, cli.STRATEGIES, "tf.distribute strategy."),
              "runtime.strategy")
  config.bind(flags.DEFINE_string("tpu", None, "TPU address for --strategy=tpu."), "runtime.tpu")
  if num_cpu_devices:
    config.bind(flags.DEFINE_integer("num_cpu_devices", None, "Split the CPU into this many "
                                     "logical devices.", lower_bound=0), "runtime.num_cpu_devices")
  config.bind(seed(), "runtime.seed")
  config.bind(compute_dtype(
      "Precision of the training step's matmuls (auto: bfloat16 on hardware with bfloat16 "
      "matmuls, else float32; bfloat16: Keras mixed_bfloat16, float32 variables and losses)."),
              "runtime.compute_dtype")
