"""The flags of the binaries that run Beam pipelines (`pipelines/`, and the demo's corpus
pipelines): `--pipeline_options` and `--num_shards`."""
from absl import flags

MORE_OPTIONS_HELP = "More Beam options (one shell-quoted string)."


def pipeline_options(help_text: str) -> flags.FlagHolder:
  return flags.DEFINE_string("pipeline_options", "", help_text)


def num_shards(help_text: str) -> flags.FlagHolder:
  """`--num_shards`: how many output shards (0: the pipeline decides, as `help_text` says)."""
  return flags.DEFINE_integer("num_shards", 0, help_text, lower_bound=0)
