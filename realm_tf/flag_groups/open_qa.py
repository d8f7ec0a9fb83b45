"""Open-QA fine-tuning's own flags, onto `task` (`experiment_config.OpenQATaskConfig`): blocks
read and scored, gold spans, the doc tower (`--retriever_top_k` and `--read_answer_block` are
the demo's too)."""
from typing import Optional

from absl import flags

from realm_tf.flag_groups import pretraining
from realm_tf.flag_groups.config_flags import ConfigFlags


def retriever_top_k(default: Optional[int] = None) -> flags.FlagHolder:
  return flags.DEFINE_integer("retriever_top_k", default, "Blocks in the fine-tuning retriever "
                              "loss.", lower_bound=1)


def read_answer_block(default: Optional[bool] = None) -> flags.FlagHolder:
  return flags.DEFINE_bool("read_answer_block", default, "Fine-tuning: when no top-k block "
                           "holds an answer, the reader reads the best answer-bearing block "
                           "of the top --retriever_top_k instead of the k-th (DPR's reader "
                           "training).")


def define_open_qa_flags(config: ConfigFlags) -> None:
  """Binds `--reader_top_k`, `--retriever_top_k`, `--max_gold_spans`, `--read_answer_block`,
  `--train_doc_tower` and `--null_document` to `task.<flag>`."""
  config.bind(flags.DEFINE_integer("reader_top_k", None, "Blocks read per question.",
                                   lower_bound=1), "task.reader_top_k")
  config.bind(retriever_top_k(), "task.retriever_top_k")
  config.bind(flags.DEFINE_integer("max_gold_spans", None, "Gold spans kept per block.",
                                   lower_bound=1), "task.max_gold_spans")
  config.bind(read_answer_block(), "task.read_answer_block")
  config.bind(flags.DEFINE_bool(
      "train_doc_tower", None, "Train the doc tower too (the patent's variant): the blocks read "
      "are re-embedded in the step; --refresh_every refreshes the index from it."),
              "task.train_doc_tower")
  config.bind(pretraining.null_document(), "task.null_document")
