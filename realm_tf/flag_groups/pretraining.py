"""REALM pre-training's own flags, onto `task` (`experiment_config.PretrainTaskConfig`): the
candidates, the masking, the MLM loss and the reader's MLM-head warm-up (some of them the
demo's, the examples pipeline's or fine-tuning's too)."""
from typing import Optional

from absl import flags

from realm_tf import cli
from realm_tf.flag_groups.config_flags import ConfigFlags


def num_candidates(default: Optional[int] = None) -> flags.FlagHolder:
  return flags.DEFINE_integer("num_candidates", default, "Pre-training's candidates K, the null "
                              "document included.", lower_bound=1)


def null_document() -> flags.FlagHolder:
  """`--null_document`: pre-training's and fine-tuning's."""
  return flags.DEFINE_bool("null_document", None, "Put the null document (an empty block) among "
                           "the candidates (fine-tuning: first among the blocks scored and "
                           "read).")


def masking(default: Optional[str] = None) -> flags.FlagHolder:
  return flags.DEFINE_enum("masking", default, cli.MASKINGS,
                           "Masked spans: salient spans (REALM) or the random ablations.")


def mlm_warmup_steps(default: Optional[int] = None) -> flags.FlagHolder:
  return flags.DEFINE_integer("mlm_warmup_steps", default, "Steps of MLM-head warm-up on the "
                              "corpus blocks before REALM, for a new reader whose weights have "
                              "no MLM head (MiniLM); 0: none.", lower_bound=0)


def define_pretraining_flags(config: ConfigFlags) -> None:
  """Binds `--num_candidates`, `--null_document`, `--exclude_source`, `--masking`,
  `--mlm_loss` and `--mlm_warmup_steps` to `task.<flag>`."""
  config.bind(num_candidates(), "task.num_candidates")
  config.bind(null_document(), "task.null_document")
  config.bind(flags.DEFINE_bool("exclude_source", None, "Drop the query's own block (trivial "
                                "retrieval)."), "task.exclude_source")
  config.bind(masking(), "task.masking")
  config.bind(flags.DEFINE_enum(
      "mlm_loss", None, ["sequence", "token"], "Marginal likelihood per sequence (the paper: "
      "one document explains all the masks) or per masked token (the released code)."),
              "task.mlm_loss")
  config.bind(mlm_warmup_steps(), "task.mlm_warmup_steps")
