"""`realm-pretrain`: REALM pre-training with an asynchronously refreshed MIPS index.

  realm-pretrain --corpus=corpus --examples_dir=corpus --model_dir=runs/realm \\
      --retriever_dir=runs/ict/retriever --encoder=minilm_l6 --init_weights=minilm

The flags set the `pretrain` experiment (`realm_tf.experiments`;
`realm-train --experiment=pretrain`).
"""
from absl import flags

from realm_tf import cli

flags.DEFINE_string("corpus", None, "The knowledge corpus: blocks-*.tfrecord shards, a corpus "
                    "directory, JSONL, DPR TSV or a released blocks.tfr.", required=True)
flags.DEFINE_alias("corpus_dir", "corpus")
flags.DEFINE_string("examples_dir", None, "Directory of examples-*.tfrecord.", required=True)
flags.DEFINE_bool("allow_unverified_examples", False, "Train on --examples_dir shards without "
                  "an examples.manifest.json (hand-made or older), uncounted.")
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, indexes.", required=True)
flags.DEFINE_string("vocab_file", "", "WordPiece vocabulary (default: MiniLM's uncased vocab).")
flags.DEFINE_string("retriever_dir", "", "Saved retriever to start from (ICT output).")
flags.DEFINE_string("reader_dir", "", "Saved reader to start from.")
flags.DEFINE_enum("encoder", cli.DEFAULT_ENCODER, cli.ENCODERS, "BERT size for new towers.")
flags.DEFINE_string("init_weights", "minilm", "BERT weights of the new towers nothing else "
                    "fills: '', 'minilm', HF safetensors or TF1 BERT ckpt.")
flags.DEFINE_string("init_realm_embedder", "", "Released REALM embedder (cc_news_pretrained/"
                    "embedder/variables/variables) -> the retriever.")
flags.DEFINE_string("init_realm_encoder", "", "Released REALM knowledge-augmented encoder "
                    "(cc_news_pretrained/bert/variables/variables) -> the reader, MLM head "
                    "included.")
flags.DEFINE_string("init_index", "", "Precomputed step-0 embeddings of --corpus by the initial "
                    "doc tower (the released block_emb, cc_news_pretrained/embedder/encoded/"
                    "encoded.ckpt, or a .npy), checked on sampled blocks instead of embedding "
                    "every block.")
flags.DEFINE_float("dropout", None, "Override the encoder dropout rate.",
                   lower_bound=0, upper_bound=1)
flags.DEFINE_enum("retriever_head", "auto", cli.RETRIEVER_HEADS,
                  "New retrievers' head: 'realm' ([CLS] pooler, Dense, LayerNorm), 'sentence' "
                  "(mean pooling, unit length); 'auto': 'sentence' for --init_weights=minilm.")
flags.DEFINE_bool("share_towers", True, "One BERT for queries and blocks (new retrievers).")
flags.DEFINE_integer("num_steps", 1000, "Training steps.", lower_bound=0)
flags.DEFINE_integer("batch_size", 16, "Global batch.", lower_bound=1)
flags.DEFINE_float("learning_rate", 3e-5, "Peak learning rate.", lower_bound=0)
flags.DEFINE_integer("mlm_warmup_steps", 300,
                     "Steps of MLM-head warm-up on the corpus blocks before REALM, for a new "
                     "reader whose --init_weights have no MLM head (MiniLM); 0: none.",
                     lower_bound=0)
flags.DEFINE_integer("num_candidates", 8, "K, null document included.", lower_bound=1)
flags.DEFINE_bool("null_document", True, "Put the null document among the candidates.")
flags.DEFINE_bool("exclude_source", True, "Drop the query's own block (trivial retrieval).")
flags.DEFINE_enum("masking", "salient_span", cli.MASKINGS, "Masking strategy.")
flags.DEFINE_enum("mlm_loss", "sequence", ["sequence", "token"],
                  "Marginal likelihood per sequence (the paper: one document explains all the "
                  "masks) or per masked token (the released code).")
flags.DEFINE_integer("query_length", 96, "Query length.", lower_bound=3)
flags.DEFINE_integer("block_length", 288, "Block length.", lower_bound=4)
flags.DEFINE_enum("refresh", "async", ["async", "sync"], "Index refresh mode.")
flags.DEFINE_integer("refresh_every", 500, "Steps between embedder snapshots / rebuilds.",
                     lower_bound=1)
flags.DEFINE_enum("index_kind", "scann", cli.INDEX_KINDS, "MIPS index.")
_INDEX = cli.define_index_flags()
cli.define_dev_recall_flags(eval_every=500)
flags.adopt_module_key_flags(cli)  # the --scann_* and --dev_data flags in --help
flags.DEFINE_list("builder_args", [], "Extra flags for the index builder (e.g. Beam runner).")
flags.DEFINE_integer("max_builder_failures", 2,
                     "Stop training after this many index builds failed in a row (async).",
                     lower_bound=1)
flags.DEFINE_enum("embedding_dtype", "auto", cli.COMPUTE_DTYPES,
                  "Doc-tower precision when embedding the corpus (auto: bfloat16 on hardware "
                  "with bfloat16 matmuls, else float32; see BENCHMARKS.md §1).")
flags.DEFINE_enum("compute_dtype", "auto", cli.COMPUTE_DTYPES,
                  "Precision of the training step's matmuls (auto as --embedding_dtype; "
                  "bfloat16: Keras mixed_bfloat16, float32 variables and loss).")
flags.DEFINE_bool("embedding_jit_compile", False,
                  "XLA-compile the doc tower when embedding the corpus (faster at BERT-base; "
                  "compiles once per length bucket; see BENCHMARKS.md §1).")
flags.DEFINE_integer("checkpoint_every", 100, "Steps between checkpoints.", lower_bound=1)
flags.DEFINE_integer("keep_checkpoints", 3, "Checkpoints kept (the newest).", lower_bound=1)
flags.DEFINE_integer("keep_indexes", 3, "Index versions kept (the newest; with their "
                     "doc-embedder snapshots).", lower_bound=1)
flags.DEFINE_enum("strategy", "default", cli.STRATEGIES, "tf.distribute strategy.")
flags.DEFINE_integer("num_cpu_devices", 0, "Split the CPU into this many logical devices.",
                     lower_bound=0)
flags.DEFINE_string("tpu", "", "TPU address for --strategy=tpu.")
flags.DEFINE_integer("seed", 0, "Seed of the initialisers and the data order.", lower_bound=0)


# Each flag's setting in the `pretrain` experiment (`realm_tf.experiments`).
SETTINGS = {
    "corpus": "task.corpus", "examples_dir": "task.examples_dir",
    "allow_unverified_examples": "task.allow_unverified_examples",
    "model_dir": "trainer.model_dir", "vocab_file": "task.vocab_file",
    "retriever_dir": "task.retriever_dir", "reader_dir": "task.reader_dir",
    "encoder": "task.model.encoder", "init_weights": "task.init.bert_weights",
    "init_realm_embedder": "task.init.realm_embedder",
    "init_realm_encoder": "task.init.realm_encoder", "init_index": "task.init.index",
    "dropout": ("task.model.encoder.dropout_rate", "task.model.encoder.attention_dropout_rate"),
    "retriever_head": "task.model.retriever_head", "share_towers": "task.share_towers",
    "num_steps": "trainer.num_steps", "batch_size": "trainer.batch_size",
    "learning_rate": "trainer.learning_rate", "mlm_warmup_steps": "task.mlm_warmup_steps",
    "num_candidates": "task.num_candidates",
    "null_document": "task.null_document", "exclude_source": "task.exclude_source",
    "masking": "task.masking", "mlm_loss": "task.mlm_loss",
    "query_length": "task.model.query_length",
    "block_length": "task.model.block_length", "refresh": "task.refresh",
    "refresh_every": "task.refresh_every", "index_kind": "task.index_kind",
    **{flag: f"task.{setting}" for flag, setting in _INDEX.settings().items()},
    "builder_args": "task.builder_args", "max_builder_failures": "task.max_builder_failures",
    "embedding_dtype": "task.embedding_dtype", "compute_dtype": "runtime.compute_dtype",
    "embedding_jit_compile": "task.embedding_jit_compile",
    "checkpoint_every": "trainer.checkpoint_every",
    "keep_checkpoints": "trainer.keep_checkpoints", "keep_indexes": "task.keep_indexes",
    "strategy": "runtime.strategy", "num_cpu_devices": "runtime.num_cpu_devices",
    "tpu": "runtime.tpu", "seed": "runtime.seed",
    "dev_data": "task.dev_data", "eval_every": "trainer.eval_every",
    "eval_max_examples": "trainer.eval_max_examples"}


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.experiments import overrides
  from realm_tf.experiments import registry
  from realm_tf.experiments.train_lib import run_experiment
  metrics = run_experiment(overrides.from_flags(registry.get("pretrain"), SETTINGS))
  if metrics:
    print({k: round(v, 4) for k, v in metrics.items()})


def run():
  cli.run("realm-pretrain", main)


if __name__ == "__main__":
  run()
