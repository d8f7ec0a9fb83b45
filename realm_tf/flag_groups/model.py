"""The model flags of the training binaries, onto `task.model` (`presets.ModelConfig`) and
`task.share_towers`: the encoder preset and its dropout, the retrieval and span heads, the doc
tower's block form."""
from typing import Optional, Sequence

from absl import flags

from realm_tf import cli
from realm_tf.flag_groups.config_flags import ConfigFlags


_ENCODER_SIZES = {"tiny": "tiny (random, tests)", "minilm_l6": "minilm_l6 (all-MiniLM-L6-v2's)",
                  "bert_base": "bert_base (REALM's)"}


def encoder(default: Optional[str] = None,
            choices: Sequence[str] = cli.ENCODERS) -> flags.FlagHolder:
  """`--encoder`: the training binaries' (`task.model.encoder`) and the demo's."""
  sizes = ", ".join(_ENCODER_SIZES[name] for name in choices)
  return flags.DEFINE_enum("encoder", default, choices, f"BERT size of new towers: {sizes}.")


def define_model_flags(config: ConfigFlags, open_qa: bool = False) -> None:
  """Binds `--encoder`, `--dropout`, `--retriever_head` and `--doc_input` to `task.model`; ICT and
  pre-training (not `open_qa`) add `--share_towers`, Open-QA the encoder's
  `--initializer_range`, `--projection_size` and the reader's span head."""
  config.bind(encoder(), "task.model.encoder")
  config.bind(flags.DEFINE_float("dropout", None, "Override the encoder dropout rate (default: "
                                 "the --encoder preset's).", lower_bound=0, upper_bound=1),
              "task.model.encoder.dropout_rate", "task.model.encoder.attention_dropout_rate")
  config.bind(flags.DEFINE_enum(
      "retriever_head", None, cli.RETRIEVER_HEADS, "The head of new retrievers: 'realm' ([CLS] "
      "pooler, Dense, LayerNorm), 'sentence' (mean pooling, unit length); 'auto': the head of "
      "the weights they start from ('sentence' for --init_weights=minilm)."),
              "task.model.retriever_head")
  config.bind(flags.DEFINE_enum(
      "doc_input", None, cli.DOC_INPUTS, "What the doc tower of new retrievers reads of a "
      "block: 'title_body' ([CLS] title [SEP] body [SEP], REALM's) or 'body' ([CLS] body "
      "[SEP]); saved with the retriever, so its indexes, refreshes and exports use it (a "
      "retriever of a previous run keeps its own)."), "task.model.doc_input")
  if not open_qa:
    config.bind(flags.DEFINE_bool("share_towers", None, "One BERT for queries and blocks (new "
                                  "retrievers)."), "task.share_towers")
    return
  config.bind(flags.DEFINE_float("initializer_range", None, "Override the encoder's "
                                 "initializer range (default: the --encoder preset's).",
                                 lower_bound=0), "task.model.encoder.initializer_range")
  config.bind(flags.DEFINE_integer("projection_size", None, "Retrieval embedding size D.",
                                   lower_bound=1), "task.model.projection_size")
  config.bind(flags.DEFINE_integer("span_hidden_size", None, "Span head width.", lower_bound=1),
              "task.model.span_hidden_size")
  config.bind(flags.DEFINE_integer("max_span_width", None, "Longest answer span (wordpieces).",
                                   lower_bound=1), "task.model.max_span_width")
  config.bind(flags.DEFINE_enum(
      "span_head", None, ["endpoint_mlp", "markers"], "The reader's span head: ORQA's endpoint MLP, or "
      "the patent's start/end marker tokens read by two separate transformers (eq. 7-9)."),
      "task.model.span_head")
  config.bind(flags.DEFINE_enum(
      "span_normalization", None, ["joint", "per_document"], "Reader spans in one softmax over "
      "every (block, span) pair (ORQA) or per block, times p(z|x) (the patent's eq. 9); "
      "answering uses the same form."), "task.model.span_normalization")
