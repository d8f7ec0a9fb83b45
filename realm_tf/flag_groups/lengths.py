"""The input-length flags, in wordpieces: `--query_length`, `--block_length`, `--reader_length`
(the training binaries' `task.model`, the demo's and the corpus pipeline's)."""
from typing import Optional

from absl import flags

from realm_tf.flag_groups.config_flags import ConfigFlags


def query_length(default: Optional[int] = None) -> flags.FlagHolder:
  return flags.DEFINE_integer("query_length", default, "Wordpieces of a query `[CLS] x [SEP]` "
                              "(ICT: a pseudo-query; fine-tuning: a question).", lower_bound=3)


def block_length(default: Optional[int] = None) -> flags.FlagHolder:
  return flags.DEFINE_integer("block_length", default, "Wordpieces of a block `[CLS] title "
                              "[SEP] body [SEP]`.", lower_bound=4)


def define_length_flags(config: ConfigFlags, reader_length: bool = False) -> None:
  """Binds `--query_length`, `--block_length` and, with `reader_length`, `--reader_length` to
  `task.model.<flag>`."""
  config.bind(query_length(), "task.model.query_length")
  config.bind(block_length(), "task.model.block_length")
  if reader_length:
    config.bind(flags.DEFINE_integer("reader_length", None, "Wordpieces of the reader's input "
                                     "`[CLS] x [SEP] z_body [SEP]`.", lower_bound=4),
                "task.model.reader_length")
