"""`realm-finetune`: Open-QA fine-tuning of a pre-trained REALM (see `qa/finetune_lib.py`).

    python -m realm_tf.finetune --model_dir=/tmp/qa/model --corpus=/data/blocks \\
        --train_data=pyserini:nq-dev --dev_data=dev.jsonl \\
        --encoder=minilm_l6 --init_checkpoint=/tmp/realm

A restarted job resumes from the latest checkpoint in --model_dir. The flags set the
`open_qa` experiment (`realm_tf.experiments`; `realm-train --experiment=open_qa`).
"""
from absl import flags

from realm_tf import cli

flags.DEFINE_string("model_dir", None, "Output directory.", required=True)
flags.DEFINE_string("corpus", None, "Knowledge corpus: blocks-*.tfrecord directory, "
                    "JSONL or DPR TSV.", required=True)
flags.DEFINE_string("train_data", None, "Training questions (ORQA JSONL, DPR TSV, "
                    "or pyserini:<name>).", required=True)
flags.DEFINE_string("dev_data", "", "Dev questions for model selection.")
flags.DEFINE_string("vocab_file", "", "WordPiece vocabulary (default: MiniLM's uncased "
                    "vocab).")
flags.DEFINE_enum("dataset", "nq", cli.DATASETS,
                  "Decides string or regex (CuratedTrec) answers.")
flags.DEFINE_enum("encoder", cli.DEFAULT_ENCODER, cli.ENCODERS,
                  "BERT size of the three towers.")
flags.DEFINE_float("initializer_range", None,
                   "Override of the encoder's initializer range.", lower_bound=0)
flags.DEFINE_float("dropout", None, "Override the encoder dropout rate.",
                   lower_bound=0, upper_bound=1)
flags.DEFINE_integer("projection_size", 128, "Retrieval embedding size D.", lower_bound=1)
flags.DEFINE_enum("retriever_head", "auto", cli.RETRIEVER_HEADS,
                  "Retrieval head: 'realm' ([CLS] pooler, Dense, LayerNorm), 'sentence' "
                  "(mean pooling, unit length); 'auto': 'sentence' with "
                  "--init_weights=minilm.")
flags.DEFINE_integer("span_hidden_size", 256, "Span head width.", lower_bound=1)
flags.DEFINE_integer("max_span_width", 10, "Longest answer span (wordpieces).", lower_bound=1)
flags.DEFINE_integer("query_length", 64, "Question wordpieces.", lower_bound=3)
flags.DEFINE_integer("block_length", 288, "Block wordpieces.", lower_bound=4)
flags.DEFINE_integer("reader_length", 320, "Reader input wordpieces.", lower_bound=4)
flags.DEFINE_string("init_checkpoint", "",
                    "TF2 checkpoint tf.train.Checkpoint(retriever=, reader=), or a "
                    "realm-pretrain --model_dir (its checkpoints, head and tower sharing), or a "
                    "realm-finetune --model_dir (fine-tuning goes on from its last checkpoint).")
flags.DEFINE_bool("init_checkpoint_share_towers", True,
                  "Whether --init_checkpoint's retriever shares its towers.")
flags.DEFINE_string("init_realm_embedder", "", "Released REALM embedder.")
flags.DEFINE_string("init_realm_encoder", "", "Released REALM encoder.")
flags.DEFINE_string("init_orqa", "", "Released ORQA checkpoint.")
flags.DEFINE_string("init_index", "", "Precomputed step-0 embeddings of --corpus by the initial "
                    "doc tower (the released block_emb checkpoint, e.g. cc_news_pretrained/"
                    "embedder/encoded/encoded.ckpt, or a .npy), checked on sampled blocks "
                    "instead of embedding every block.")
flags.DEFINE_string("init_weights", "", "BERT weights of every tower: '', "
                    "'minilm', HF safetensors or TF1 BERT ckpt.")
flags.DEFINE_enum("span_normalization", "joint", ["joint", "per_document"],
                  "Reader spans in one softmax over every (block, span) pair (ORQA) or per "
                  "block, times p(z|x) (the patent's eq. 9); answering uses the same form.")
flags.DEFINE_integer("batch_size", 4, "Questions per step (global).", lower_bound=1)
flags.DEFINE_integer("num_steps", 10000, "Training steps (0: export the "
                     "initialisation as a QA model).", lower_bound=0)
flags.DEFINE_alias("num_train_steps", "num_steps")
flags.DEFINE_float("learning_rate", 1e-5, "Peak learning rate.", lower_bound=0)
flags.DEFINE_float("retriever_learning_rate", None,
                   "The query tower's peak learning rate (default: "
                   "--learning_rate).", lower_bound=0)
flags.DEFINE_integer("warmup_steps", None,
                     "Warm-up steps (default min(10000, max(100, steps/10))).", lower_bound=0)
flags.DEFINE_integer("reader_top_k", 5, "Blocks read per question.", lower_bound=1)
flags.DEFINE_integer("retriever_top_k", 5000, "Blocks in the retriever loss.", lower_bound=1)
flags.DEFINE_integer("max_gold_spans", 32, "Gold spans kept per block.", lower_bound=1)
flags.DEFINE_bool("read_answer_block", False,
                  "Training: when no top-k block holds an answer, read the best "
                  "answer-bearing block of the top --retriever_top_k instead of "
                  "the k-th (DPR's reader training).")
flags.DEFINE_enum("index_kind", "scann", cli.INDEX_KINDS, "MIPS index.")
_INDEX = cli.define_index_flags()
flags.adopt_module_key_flags(cli)  # the --scann_* flags in --help
flags.DEFINE_integer("refresh_every", 0,
                     "Refresh the index every N steps (0: frozen index).", lower_bound=0)
flags.DEFINE_alias("index_refresh_steps", "refresh_every")
flags.DEFINE_bool("train_doc_tower", False,
                  "Train the doc tower too (the patent's variant): the blocks read are "
                  "re-embedded in the step; --refresh_every refreshes the index from it.")
flags.DEFINE_enum("refresh", "sync", ["sync", "async"],
                  "Index refresh in the trainer, or by the index-builder process while "
                  "training goes on (async; needs --train_doc_tower).")
flags.DEFINE_list("builder_args", [], "Extra flags for the asynchronous index builder.")
flags.DEFINE_integer("max_builder_failures", 2,
                     "Stop after this many asynchronous index builds failed in a row.",
                     lower_bound=1)
flags.DEFINE_bool("null_document", False,
                  "Put the null document first among the blocks scored and read.")
flags.DEFINE_integer("eval_every", 1000, "Dev evaluation cadence.", lower_bound=1)
flags.DEFINE_alias("eval_every_steps", "eval_every")
flags.DEFINE_integer("eval_max_examples", 0, "Dev questions evaluated (0: all).", lower_bound=0)
flags.DEFINE_integer("checkpoint_every", 1000, "Steps between checkpoints.", lower_bound=1)
flags.DEFINE_alias("checkpoint_every_steps", "checkpoint_every")
flags.DEFINE_integer("keep_checkpoints", 3, "Checkpoints kept.", lower_bound=1)
flags.DEFINE_integer("log_every", 100, "Log cadence.", lower_bound=1)
flags.DEFINE_alias("log_every_steps", "log_every")
flags.DEFINE_integer("seed", 0, "Seed.", lower_bound=0)
flags.DEFINE_enum("compute_dtype", "auto", cli.COMPUTE_DTYPES,
                  "Precision of the training step's matmuls (auto: bfloat16 on "
                  "hardware with bfloat16 matmuls, else float32; bfloat16: Keras "
                  "mixed_bfloat16, float32 variables and losses).")
flags.DEFINE_enum("embedding_dtype", "auto", cli.COMPUTE_DTYPES,
                  "Doc-tower precision when embedding the QA index (auto as "
                  "--compute_dtype).")
flags.DEFINE_enum("embedding_storage_dtype", "float32", ("float32", "bfloat16", "float16"),
                  "Dtype the QA index's block embeddings are stored in, memory-mapped "
                  "(bytes per block: 4, 2, 2 times the projection size).")
flags.DEFINE_enum("strategy", "default", cli.STRATEGIES,
                  "tf.distribute strategy.")
flags.DEFINE_string("tpu", "", "TPU address for --strategy=tpu.")


# Each flag's setting in the `open_qa` experiment (`realm_tf.experiments`).
SETTINGS = {
    "model_dir": "trainer.model_dir", "corpus": "task.corpus", "train_data": "task.train_data",
    "dev_data": "task.dev_data", "vocab_file": "task.vocab_file", "dataset": "task.dataset",
    "encoder": "task.model.encoder",
    "initializer_range": "task.model.encoder.initializer_range",
    "dropout": ("task.model.encoder.dropout_rate", "task.model.encoder.attention_dropout_rate"),
    "projection_size": "task.model.projection_size",
    "retriever_head": "task.model.retriever_head",
    "span_hidden_size": "task.model.span_hidden_size",
    "max_span_width": "task.model.max_span_width",
    "span_normalization": "task.model.span_normalization",
    "query_length": "task.model.query_length",
    "block_length": "task.model.block_length", "reader_length": "task.model.reader_length",
    "init_checkpoint": "task.init.checkpoint",
    "init_checkpoint_share_towers": "task.init.checkpoint_share_towers",
    "init_realm_embedder": "task.init.realm_embedder",
    "init_realm_encoder": "task.init.realm_encoder", "init_orqa": "task.init.orqa",
    "init_index": "task.init.index",
    "init_weights": "task.init.bert_weights", "batch_size": "trainer.batch_size",
    "num_steps": "trainer.num_steps", "learning_rate": "trainer.learning_rate",
    "retriever_learning_rate": "trainer.retriever_learning_rate",
    "warmup_steps": "trainer.warmup_steps", "reader_top_k": "task.reader_top_k",
    "retriever_top_k": "task.retriever_top_k", "max_gold_spans": "task.max_gold_spans",
    "read_answer_block": "task.read_answer_block",
    "index_kind": "task.index_kind",
    **{flag: f"task.{setting}" for flag, setting in _INDEX.settings().items()},
    "refresh_every": "task.index_refresh_steps", "train_doc_tower": "task.train_doc_tower",
    "refresh": "task.refresh", "builder_args": "task.builder_args",
    "max_builder_failures": "task.max_builder_failures", "null_document": "task.null_document",
    "eval_every": "trainer.eval_every",
    "eval_max_examples": "trainer.eval_max_examples",
    "checkpoint_every": "trainer.checkpoint_every",
    "keep_checkpoints": "trainer.keep_checkpoints", "log_every": "trainer.log_every",
    "seed": "runtime.seed", "compute_dtype": "runtime.compute_dtype",
    "embedding_dtype": "task.embedding_dtype",
    "embedding_storage_dtype": "task.embedding_storage_dtype", "strategy": "runtime.strategy",
    "tpu": "runtime.tpu"}


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.experiments import overrides
  from realm_tf.experiments import registry
  from realm_tf.experiments.train_lib import run_experiment
  result = run_experiment(overrides.from_flags(registry.get("open_qa"), SETTINGS))
  print(f"trained to step {int(result['step'])}; best dev exact match "
        f"{result['best_exact_match']:.4f}")


def run():
  cli.run("realm-finetune", main)


if __name__ == "__main__":
  run()
