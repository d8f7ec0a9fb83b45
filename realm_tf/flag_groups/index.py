"""The MIPS-index flags: the index kind and ScaNN settings, its refresh in training, the
asynchronous builder, and the doc tower's precision when it embeds the corpus (the training
binaries' `task`, and the binaries that build or load an index)."""
from typing import Optional, Sequence

from absl import flags

from realm_tf import cli
from realm_tf.flag_groups.config_flags import ConfigFlags


def index_kind(help_text: str, default: Optional[str] = None,
               choices: Sequence[str] = cli.INDEX_KINDS, alias: bool = False) -> flags.FlagHolder:
  """`--index_kind` (and its earlier name `--kind` with `alias`)."""
  holder = flags.DEFINE_enum("index_kind", default, choices, help_text)
  if alias:
    flags.DEFINE_alias("kind", "index_kind")
  return holder


def refresh_every(default: Optional[int] = None, frozen: bool = False) -> flags.FlagHolder:
  """`--refresh_every`: pre-training's, the demo's and (`frozen`: 0 allowed) fine-tuning's."""
  return flags.DEFINE_integer("refresh_every", default, "Steps between index refreshes (async: "
                              "doc-embedder snapshots for the index builder; fine-tuning: 0 "
                              "keeps the index frozen).",
                              lower_bound=0 if frozen else 1)


def embedding_dtype(default: Optional[str] = None) -> flags.FlagHolder:
  return flags.DEFINE_enum("embedding_dtype", default, cli.COMPUTE_DTYPES,
                           "Doc-tower precision when embedding the corpus (auto: bfloat16 on "
                           "hardware with bfloat16 matmuls, else float32; BENCHMARKS.md §1, "
                           "§10).")


def define_index_flags(config: ConfigFlags, open_qa: bool = False) -> None:
  """Binds `--index_kind`, the ScaNN and shard-size flags (`cli.define_index_flags`), `--refresh`,
  `--refresh_every`, `--builder_args`, `--max_builder_failures`, `--max_index_staleness` and
  `--embedding_dtype` to
  `task`; pre-training adds `--keep_indexes` and `--embedding_jit_compile`, `open_qa`
  `--embedding_storage_dtype` and `--refresh_every`'s earlier name `--index_refresh_steps`."""
  config.bind(index_kind("MIPS index."), "task.index_kind")
  index_flags = cli.define_index_flags()
  settings = index_flags.settings()
  for holder in index_flags:
    config.bind(holder, f"task.{settings[holder.name]}")
  config.bind(flags.DEFINE_enum(
      "refresh", None, ["async", "sync"], "Index refresh by the trainer itself (sync) or by "
      "the index-builder process while training goes on (async"
      f"{': needs --train_doc_tower' if open_qa else ''})."), "task.refresh")
  config.bind(refresh_every(frozen=open_qa),
              "task.index_refresh_steps" if open_qa else "task.refresh_every")
  config.bind(flags.DEFINE_list("builder_args", None, "Extra flags for the asynchronous index "
                                "builder (e.g. a Beam runner, or --device=cpu to keep it off "
                                "the trainer's GPU)."), "task.builder_args")
  config.bind(flags.DEFINE_integer("max_builder_failures", None, "Stop training after this many "
                                   "asynchronous index builds failed in a row.", lower_bound=1),
              "task.max_builder_failures")
  config.bind(flags.DEFINE_integer(
      "max_index_staleness", None, "Asynchronous refresh: training waits for a running or "
      "pending index build when the index in use is more than this many steps old (0: never "
      "waits; the staleness is then whatever the builder keeps up with).", lower_bound=0),
              "task.max_index_staleness")
  config.bind(embedding_dtype(), "task.embedding_dtype")
  if open_qa:
    config.alias(flags.DEFINE_alias("index_refresh_steps", "refresh_every"), "refresh_every")
    config.bind(flags.DEFINE_enum(
        "embedding_storage_dtype", None, ("float32", "bfloat16", "float16"), "Dtype the QA "
        "index's block embeddings are stored in, memory-mapped (bytes per block: 4, 2, 2 times "
        "the projection size)."), "task.embedding_storage_dtype")
    return
  config.bind(flags.DEFINE_integer("keep_indexes", None, "Index versions kept (the newest; with "
                                   "their doc-embedder snapshots).", lower_bound=1),
              "task.keep_indexes")
  config.bind(flags.DEFINE_bool(
      "embedding_jit_compile", None, "XLA-compile the doc tower when embedding the corpus "
      "(faster at BERT-base; compiles once per length bucket; see BENCHMARKS.md §1)."),
              "task.embedding_jit_compile")
