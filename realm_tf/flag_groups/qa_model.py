"""The flags of the binaries that load a trained model and answer with it (`realm-ask`,
`realm-serve`, `realm-evaluate`, `realm-export-hub`, `realm-probe`; `--k` and `--question` are
the demo's too)."""
from typing import NamedTuple

from absl import flags

from realm_tf import cli
from realm_tf.flag_groups import index
from realm_tf.flag_groups import paths
from realm_tf.flag_groups import runtime

CORPUS_HELP = ("Another knowledge corpus: blocks-*.tfrecord directory, JSONL, DPR TSV or a "
               "released blocks.tfr (default: the model's).")
EMBEDDINGS_HELP = ("Precomputed embeddings of --corpus: an index directory, embedding shards, "
                   "or the released block_emb checkpoint / a .npy (verified against the doc "
                   "embedder).")
COMPUTE_DTYPE_HELP = ("Precision of the query tower and the reader when answering (auto: "
                      "bfloat16 matmuls with float32 variables, scores and logits on hardware "
                      "with bfloat16 matmuls, else float32; docs/exports.md).")
INDEX_KIND_HELP = ("MIPS index for --corpus, or of a released model's import (default: the "
                   "model's; ScaNN for a released model).")


def k(help_text: str, default: int = 5) -> flags.FlagHolder:
  """`--k`: the blocks read (or retrieved) per question."""
  return flags.DEFINE_integer("k", default, help_text, lower_bound=1)


def question(help_text: str) -> flags.FlagHolder:
  """`--question` (repeatable)."""
  return flags.DEFINE_multi_string("question", [], help_text)


class QAModelFlags(NamedTuple):
  """The flags of the binaries that load a QA model directory (`ask`, `serve`)."""
  model_dir: flags.FlagHolder
  corpus: flags.FlagHolder
  embeddings_dir: flags.FlagHolder
  index_kind: flags.FlagHolder
  index: cli.IndexFlags
  embedding_dtype: flags.FlagHolder
  released: cli.ReleasedFlags
  compute_dtype: flags.FlagHolder


def define_qa_model_flags() -> QAModelFlags:
  """Defines `--model_dir`, `--corpus`, `--embeddings_dir`, `--index_kind`, the ScaNN settings
  of the index built for `--corpus` (or a released model's import), `--embedding_dtype`, the
  released-import flags and `--compute_dtype`; the calling binary lists them in its `--help`
  with `flags.adopt_module_key_flags` of this module, `paths`, `index`, `runtime` and `cli`."""
  holders = QAModelFlags(
      paths.model_dir("Fine-tuned model directory, or a released ORQA model directory "
                      "(default $REALM_TF_QA_MODEL).", default=""),
      paths.corpus(CORPUS_HELP, default=""),
      paths.embeddings_dir(EMBEDDINGS_HELP),
      index.index_kind(INDEX_KIND_HELP, default="", choices=("",) + cli.INDEX_KINDS),
      cli.define_index_flags(),
      index.embedding_dtype(default="auto"),
      cli.define_released_flags(),
      runtime.compute_dtype(COMPUTE_DTYPE_HELP, default="auto"))
  flags.register_multi_flags_validator(
      ["embeddings_dir", "corpus"], lambda f: not f["embeddings_dir"] or f["corpus"],
      "--embeddings_dir needs the --corpus it embeds (the model's own corpus has its index)")
  return holders
