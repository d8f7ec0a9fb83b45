"""`realm-pretrain`: REALM pre-training with an asynchronously refreshed MIPS index.

  realm-pretrain --corpus=corpus --examples_dir=corpus --model_dir=runs/realm \\
      --retriever_dir=runs/ict/retriever --encoder=minilm_l6 --init_weights=minilm
"""
import os

from absl import flags

from realm_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", None, "Directory of blocks-*.tfrecord shards.", required=True)
flags.DEFINE_alias("corpus_dir", "corpus")
flags.DEFINE_string("examples_dir", None, "Directory of examples-*.tfrecord.", required=True)
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, indexes.", required=True)
flags.DEFINE_string("vocab_file", "", "WordPiece vocabulary (default: MiniLM's uncased vocab).")
flags.DEFINE_string("retriever_dir", "", "Saved retriever to start from (ICT output).")
flags.DEFINE_string("reader_dir", "", "Saved reader to start from.")
flags.DEFINE_enum("encoder", cli.DEFAULT_ENCODER, cli.ENCODERS, "BERT size for new towers.")
flags.DEFINE_string("init_weights", "minilm", "'', 'minilm', HF safetensors or TF1 BERT ckpt.")
flags.DEFINE_float("dropout", None, "Override the encoder dropout rate.")
flags.DEFINE_enum("retriever_head", "auto", cli.RETRIEVER_HEADS,
                  "New retrievers' head: 'realm' ([CLS] pooler, Dense, LayerNorm), 'sentence' "
                  "(mean pooling, unit length); 'auto': 'sentence' for --init_weights=minilm.")
flags.DEFINE_bool("share_towers", True, "One BERT for queries and blocks (new retrievers).")
flags.DEFINE_integer("num_steps", 1000, "Training steps.")
flags.DEFINE_integer("batch_size", 16, "Global batch.")
flags.DEFINE_float("learning_rate", 3e-5, "Peak learning rate.")
flags.DEFINE_integer("num_candidates", 8, "K, null document included.")
flags.DEFINE_bool("null_document", True, "Put the null document among the candidates.")
flags.DEFINE_bool("exclude_source", True, "Drop the query's own block (trivial retrieval).")
flags.DEFINE_enum("masking", "salient_span", cli.MASKINGS, "Masking strategy.")
flags.DEFINE_integer("query_length", 96, "Query length.")
flags.DEFINE_integer("block_length", 288, "Block length.")
flags.DEFINE_enum("refresh", "async", ["async", "sync"], "Index refresh mode.")
flags.DEFINE_integer("refresh_every", 500, "Steps between embedder snapshots / rebuilds.")
flags.DEFINE_enum("index_kind", "scann", cli.INDEX_KINDS, "MIPS index.")
_SCANN = cli.define_scann_flags()
flags.adopt_module_key_flags(cli)  # the --scann_* flags in --help
flags.DEFINE_list("builder_args", [], "Extra flags for the index builder (e.g. Beam runner).")
flags.DEFINE_integer("max_builder_failures", 2,
                     "Stop training after this many index builds failed in a row (async).")
flags.DEFINE_enum("embedding_dtype", "auto", cli.COMPUTE_DTYPES,
                  "Doc-tower precision when embedding the corpus (auto: bfloat16 on hardware "
                  "with bfloat16 matmuls, else float32; see BENCHMARKS.md §1).")
flags.DEFINE_enum("compute_dtype", "auto", cli.COMPUTE_DTYPES,
                  "Precision of the training step's matmuls (auto as --embedding_dtype; "
                  "bfloat16: Keras mixed_bfloat16, float32 variables and loss).")
flags.DEFINE_bool("embedding_jit_compile", False,
                  "XLA-compile the doc tower when embedding the corpus (faster at BERT-base; "
                  "compiles once per length bucket; see BENCHMARKS.md §1).")
flags.DEFINE_integer("checkpoint_every", 100, "Steps between checkpoints.")
flags.DEFINE_integer("keep_checkpoints", 3, "Checkpoints kept (the newest).")
flags.DEFINE_integer("keep_indexes", 3, "Index versions kept (the newest; with their "
                     "doc-embedder snapshots).")
flags.DEFINE_enum("strategy", "default", cli.STRATEGIES, "tf.distribute strategy.")
flags.DEFINE_integer("num_cpu_devices", 0, "Split the CPU into this many logical devices.")
flags.DEFINE_string("tpu", "", "TPU address for --strategy=tpu.")
flags.DEFINE_integer("seed", 0, "Seed of the initialisers and the data order.")


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf import presets
  from realm_tf import pretrained
  from realm_tf.data.block_store import BlockStore
  from realm_tf.keras import keras
  from realm_tf.mips.index_builder import ScannSettings
  from realm_tf.models import precision
  from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
  from realm_tf.training import distribute
  from realm_tf.training.index_refresh import AsynchronousRefresher
  from realm_tf.training.index_refresh import SynchronousRefresher
  from realm_tf.training.pretraining_lib import PretrainingConfig
  from realm_tf.training.pretraining_lib import RealmPretrainer
  if FLAGS.num_cpu_devices:
    distribute.split_cpu(FLAGS.num_cpu_devices)
  # Before any TensorFlow op: MultiWorkerMirroredStrategy configures collective ops first.
  strategy = distribute.build_strategy(FLAGS.strategy, FLAGS.tpu)
  keras.utils.set_random_seed(FLAGS.seed)
  tokenizer = (WordpieceTokenizer.from_vocab_file(FLAGS.vocab_file) if FLAGS.vocab_file
               else pretrained.minilm_tokenizer())
  store = BlockStore.load(FLAGS.corpus)
  encoder = presets.encoder_config(FLAGS.encoder, tokenizer.vocab_size, FLAGS.dropout)
  with strategy.scope(), precision.policy_scope(FLAGS.compute_dtype):
    retriever = presets.build_retriever(encoder, FLAGS.share_towers, FLAGS.init_weights,
                                        FLAGS.retriever_dir, head=FLAGS.retriever_head)
    reader = presets.build_reader(encoder, FLAGS.init_weights, FLAGS.reader_dir)
  special = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  index_root = os.path.join(FLAGS.model_dir, "index")
  scann = ScannSettings(**_SCANN.values())
  if FLAGS.refresh == "sync":
    refresher = SynchronousRefresher(index_root, FLAGS.refresh_every, store, special,
                                     FLAGS.index_kind, FLAGS.block_length,
                                     compute_dtype=FLAGS.embedding_dtype,
                                     jit_compile=FLAGS.embedding_jit_compile,
                                     keep_versions=FLAGS.keep_indexes, scann=scann)
  else:
    refresher = AsynchronousRefresher(index_root, FLAGS.refresh_every, store, special,
                                      FLAGS.corpus, os.path.join(FLAGS.model_dir, "snapshots"),
                                      FLAGS.index_kind, FLAGS.block_length, FLAGS.builder_args,
                                      compute_dtype=FLAGS.embedding_dtype,
                                      jit_compile=FLAGS.embedding_jit_compile,
                                      max_builder_failures=FLAGS.max_builder_failures,
                                      keep_versions=FLAGS.keep_indexes, scann=scann)
  config = PretrainingConfig(
      model_dir=FLAGS.model_dir, examples_dir=FLAGS.examples_dir, num_steps=FLAGS.num_steps,
      batch_size=FLAGS.batch_size, learning_rate=FLAGS.learning_rate,
      num_candidates=FLAGS.num_candidates, null_document=FLAGS.null_document,
      exclude_source=FLAGS.exclude_source, masking=FLAGS.masking,
      query_length=FLAGS.query_length, block_length=FLAGS.block_length,
      checkpoint_every=FLAGS.checkpoint_every,
      keep_checkpoints=FLAGS.keep_checkpoints, seed=FLAGS.seed)
  history = RealmPretrainer(config, retriever, reader, store, tokenizer, refresher,
                            strategy).train()
  if history:
    print({k: round(v, 4) for k, v in history[-1].items()})


def run():
  cli.run("realm-pretrain", main)


if __name__ == "__main__":
  run()
