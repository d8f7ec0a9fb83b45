"""The directories and files the binaries name alike: `--model_dir`, `--output_dir`, `--corpus`,
`--vocab_file`, `--embeddings_dir`.

One definition each (name, type); what it holds for the calling binary is its `help_text`. The
training binaries' are bound to their experiment's settings (`flag_groups.data`,
`flag_groups.trainer`).
"""
from typing import Optional

from absl import flags


def model_dir(help_text: str, default: Optional[str] = None,
              required: bool = False) -> flags.FlagHolder:
  """`--model_dir`: the run a binary writes, or the model it loads."""
  return flags.DEFINE_string("model_dir", default, help_text, required=required)


def output_dir(help_text: str, default: Optional[str] = None,
               required: bool = False) -> flags.FlagHolder:
  """`--output_dir`: where a pipeline, the demo or the knowledge world writes."""
  return flags.DEFINE_string("output_dir", default, help_text, required=required)


def corpus(help_text: str, default: Optional[str] = None,
           required: bool = False, alias: bool = False) -> flags.FlagHolder:
  """`--corpus` (and its earlier name `--corpus_dir` with `alias`): the knowledge corpus."""
  holder = flags.DEFINE_string("corpus", default, help_text, required=required)
  if alias:
    flags.DEFINE_alias("corpus_dir", "corpus")
  return holder


def vocab_file(help_text: str, default: Optional[str] = None) -> flags.FlagHolder:
  """`--vocab_file`: the WordPiece vocabulary."""
  return flags.DEFINE_string("vocab_file", default, help_text)


def embeddings_dir(help_text: str) -> flags.FlagHolder:
  """`--embeddings_dir`: block embeddings of `--corpus`, precomputed or kept."""
  return flags.DEFINE_string("embeddings_dir", "", help_text)
