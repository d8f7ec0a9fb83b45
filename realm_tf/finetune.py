"""`realm-finetune`: Open-QA fine-tuning of a pre-trained REALM (see `qa/finetune_lib.py`).

    python -m realm_tf.finetune --model_dir=/tmp/qa/model --corpus=/data/blocks \\
        --train_data=pyserini:nq-dev --dev_data=dev.jsonl \\
        --encoder=minilm_l6 --init_checkpoint=/tmp/realm/ckpt

A restarted job resumes from the latest checkpoint in --model_dir.
"""
import os

from absl import flags

from realm_tf import cli

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Output directory.", required=True)
_CORPUS = flags.DEFINE_string("corpus", None, "Knowledge corpus: blocks-*.tfrecord directory, "
                              "JSONL or DPR TSV.", required=True)
_TRAIN = flags.DEFINE_string("train_data", None, "Training questions (ORQA JSONL, DPR TSV, "
                             "or pyserini:<name>).", required=True)
_DEV = flags.DEFINE_string("dev_data", "", "Dev questions for model selection.")
_VOCAB = flags.DEFINE_string("vocab_file", "", "WordPiece vocabulary (default: MiniLM's uncased "
                             "vocab).")
_DATASET = flags.DEFINE_enum("dataset", "nq", cli.DATASETS,
                             "Decides string or regex (CuratedTrec) answers.")
_ENCODER = flags.DEFINE_enum("encoder", cli.DEFAULT_ENCODER, cli.ENCODERS,
                             "BERT size of the three towers.")
_INIT_RANGE = flags.DEFINE_float("initializer_range", None,
                                 "Override of the encoder's initializer range.")
_DROPOUT = flags.DEFINE_float("dropout", None, "Override the encoder dropout rate.")
_PROJECTION = flags.DEFINE_integer("projection_size", 128, "Retrieval embedding size D.")
_HEAD = flags.DEFINE_enum("retriever_head", "auto", cli.RETRIEVER_HEADS,
                          "Retrieval head: 'realm' ([CLS] pooler, Dense, LayerNorm), 'sentence' "
                          "(mean pooling, unit length); 'auto': 'sentence' with "
                          "--init_weights=minilm.")
_SPAN_HIDDEN = flags.DEFINE_integer("span_hidden_size", 256, "Span head width.")
_MAX_SPAN = flags.DEFINE_integer("max_span_width", 10, "Longest answer span (wordpieces).")
_QUERY_LEN = flags.DEFINE_integer("query_length", 64, "Question wordpieces.")
_BLOCK_LEN = flags.DEFINE_integer("block_length", 288, "Block wordpieces.")
_READER_LEN = flags.DEFINE_integer("reader_length", 320, "Reader input wordpieces.")
_INIT_CKPT = flags.DEFINE_string("init_checkpoint", "",
                                 "TF2 checkpoint tf.train.Checkpoint(retriever=, reader=).")
_INIT_SHARED = flags.DEFINE_bool("init_checkpoint_share_towers", True,
                                 "Whether --init_checkpoint's retriever shares its towers.")
_INIT_EMBEDDER = flags.DEFINE_string("init_realm_embedder", "", "Released REALM embedder.")
_INIT_ENCODER = flags.DEFINE_string("init_realm_encoder", "", "Released REALM encoder.")
_INIT_ORQA = flags.DEFINE_string("init_orqa", "", "Released ORQA checkpoint.")
_INIT_WEIGHTS = flags.DEFINE_string("init_weights", "", "BERT weights of every tower: '', "
                                    "'minilm', HF safetensors or TF1 BERT ckpt.")
_BATCH = flags.DEFINE_integer("batch_size", 4, "Questions per step (global).")
_STEPS = flags.DEFINE_integer("num_steps", 10000, "Training steps (0: export the "
                             "initialisation as a QA model).")
flags.DEFINE_alias("num_train_steps", "num_steps")
_LR = flags.DEFINE_float("learning_rate", 1e-5, "Peak learning rate.")
_RETRIEVER_LR = flags.DEFINE_float("retriever_learning_rate", None,
                                   "The query tower's peak learning rate (default: "
                                   "--learning_rate).")
_WARMUP = flags.DEFINE_integer("warmup_steps", None,
                               "Warm-up steps (default min(10000, max(100, steps/10))).")
_READ_K = flags.DEFINE_integer("reader_top_k", 5, "Blocks read per question.")
_RETRIEVE_K = flags.DEFINE_integer("retriever_top_k", 5000, "Blocks in the retriever loss.")
_GOLD = flags.DEFINE_integer("max_gold_spans", 32, "Gold spans kept per block.")
_INDEX = flags.DEFINE_enum("index_kind", "scann", cli.INDEX_KINDS, "MIPS index.")
_SCANN = cli.define_scann_flags()
flags.adopt_module_key_flags(cli)  # the --scann_* flags in --help
_REFRESH = flags.DEFINE_integer("refresh_every", 0,
                                "Refresh the index every N steps (0: frozen index).")
flags.DEFINE_alias("index_refresh_steps", "refresh_every")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", 1000, "Dev evaluation cadence.")
flags.DEFINE_alias("eval_every_steps", "eval_every")
_EVAL_MAX = flags.DEFINE_integer("eval_max_examples", 0, "Dev questions evaluated (0: all).")
_CKPT_EVERY = flags.DEFINE_integer("checkpoint_every", 1000, "Steps between checkpoints.")
flags.DEFINE_alias("checkpoint_every_steps", "checkpoint_every")
_KEEP = flags.DEFINE_integer("keep_checkpoints", 3, "Checkpoints kept.")
_LOG_EVERY = flags.DEFINE_integer("log_every", 100, "Log cadence.")
flags.DEFINE_alias("log_every_steps", "log_every")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
_COMPUTE = flags.DEFINE_enum("compute_dtype", "auto", cli.COMPUTE_DTYPES,
                             "Precision of the training step's matmuls (auto: bfloat16 on "
                             "hardware with bfloat16 matmuls, else float32; bfloat16: Keras "
                             "mixed_bfloat16, float32 variables and losses).")
_EMBEDDING_DTYPE = flags.DEFINE_enum("embedding_dtype", "auto", cli.COMPUTE_DTYPES,
                                     "Doc-tower precision when embedding the QA index (auto as "
                                     "--compute_dtype).")
_STRATEGY = flags.DEFINE_enum("strategy", "default", cli.STRATEGIES,
                              "tf.distribute strategy.")
_TPU = flags.DEFINE_string("tpu", "", "TPU address for --strategy=tpu.")


def config_from_flags():
  """The `FineTuneConfig` the flags describe."""
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf import presets
  from realm_tf import pretrained
  from realm_tf.mips.index_builder import ScannSettings
  from realm_tf.qa import finetune_lib
  from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
  vocab_file = _VOCAB.value or os.path.join(pretrained.minilm_dir(), "vocab.txt")
  vocab_size = WordpieceTokenizer.from_vocab_file(vocab_file).vocab_size
  encoder = presets.encoder_config(_ENCODER.value, vocab_size, _DROPOUT.value,
                                   _INIT_RANGE.value)
  return finetune_lib.FineTuneConfig(
      model_dir=_MODEL_DIR.value, corpus=_CORPUS.value, train_data=_TRAIN.value,
      vocab_file=vocab_file, dev_data=_DEV.value, dataset=_DATASET.value,
      model=presets.ModelConfig(
          encoder=encoder, projection_size=_PROJECTION.value,
          retriever_head=presets.resolve_head(_HEAD.value, _INIT_WEIGHTS.value),
          span_hidden_size=_SPAN_HIDDEN.value, max_span_width=_MAX_SPAN.value,
          query_length=_QUERY_LEN.value, block_length=_BLOCK_LEN.value,
          reader_length=_READER_LEN.value),
      init=presets.InitConfig(
          checkpoint=_INIT_CKPT.value, checkpoint_share_towers=_INIT_SHARED.value,
          realm_embedder=_INIT_EMBEDDER.value, realm_encoder=_INIT_ENCODER.value,
          orqa=_INIT_ORQA.value, bert_weights=_INIT_WEIGHTS.value),
      batch_size=_BATCH.value, num_train_steps=_STEPS.value, learning_rate=_LR.value,
      retriever_learning_rate=_RETRIEVER_LR.value,
      warmup_steps=_WARMUP.value, reader_top_k=_READ_K.value,
      retriever_top_k=_RETRIEVE_K.value, max_gold_spans=_GOLD.value,
      index_kind=_INDEX.value, scann=ScannSettings(**_SCANN.values()),
      index_refresh_steps=_REFRESH.value,
      eval_every_steps=_EVAL_EVERY.value, eval_max_examples=_EVAL_MAX.value,
      checkpoint_every_steps=_CKPT_EVERY.value, keep_checkpoints=_KEEP.value,
      log_every_steps=_LOG_EVERY.value, seed=_SEED.value, compute_dtype=_COMPUTE.value,
      embedding_dtype=_EMBEDDING_DTYPE.value)


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top
  from realm_tf.qa import finetune_lib
  from realm_tf.training import distribute
  strategy = distribute.build_strategy(_STRATEGY.value, _TPU.value)
  result = finetune_lib.run_finetuning(config_from_flags(), strategy,
                                       log=lambda message: print(message, flush=True))
  print(f"trained to step {result.step}; best dev exact match {result.best_exact_match:.4f}")


def run():
  cli.run("realm-finetune", main)


if __name__ == "__main__":
  run()
