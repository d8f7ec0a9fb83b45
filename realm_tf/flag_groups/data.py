"""The data flags of the training binaries, onto `task`: the corpus, vocabulary, pre-training
examples and questions (`--dataset` is `realm-evaluate`'s too)."""
from typing import Optional

from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import paths
from realm_tf.flag_groups.config_flags import ConfigFlags


def dataset(default: Optional[str] = None) -> flags.FlagHolder:
  return flags.DEFINE_enum("dataset", default, cli.DATASETS,
                           "Decides string or regex (CuratedTrec) answers.")


def define_data_flags(config: ConfigFlags, corpus_dir_alias: bool = False,
                      examples: bool = False, questions: bool = False) -> None:
  """Binds `--corpus` (with its earlier name `--corpus_dir`: `corpus_dir_alias`),
  `--vocab_file` and `--dev_data` to `task.<flag>`; `examples` adds pre-training's
  `--examples_dir` and `--allow_unverified_examples`, `questions` fine-tuning's `--train_data`
  and `--dataset`."""
  config.bind(paths.corpus("The knowledge corpus: blocks-*.tfrecord shards (a corpus "
                           "directory), JSONL, DPR TSV or a released blocks.tfr.",
                           required=True, alias=corpus_dir_alias), "task.corpus",
              show_default=False)
  config.bind(paths.vocab_file("WordPiece vocabulary ('': MiniLM's uncased vocab)."),
              "task.vocab_file")
  config.bind(flags.DEFINE_string(
      "dev_data", None, "Held-out questions (ORQA JSONL, DPR TSV or pyserini:<name>; never a "
      "test set), evaluated at the start and every --eval_every steps (fine-tuning: exact "
      "match and recall@k; ICT and pre-training: recall@5/@20 over the corpus); the best "
      "checkpoint is kept in best/."), "task.dev_data")
  if examples:
    config.bind(flags.DEFINE_string("examples_dir", None, "Directory of examples-*.tfrecord.",
                                    required=True), "task.examples_dir", show_default=False)
    config.bind(flags.DEFINE_bool(
        "allow_unverified_examples", None, "Train on --examples_dir shards without an "
        "examples.manifest.json (hand-made or older), uncounted."),
                "task.allow_unverified_examples")
  if questions:
    config.bind(flags.DEFINE_string("train_data", None, "Training questions (ORQA JSONL, DPR "
                                    "TSV, or pyserini:<name>).", required=True),
                "task.train_data", show_default=False)
    config.bind(dataset(), "task.dataset")
