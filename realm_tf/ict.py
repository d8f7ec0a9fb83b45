"""`realm-ict`: ICT warm-start of the retriever over a block corpus.

  realm-ict --corpus=corpus --model_dir=runs/ict --encoder=minilm_l6 --init_weights=minilm
"""
from absl import flags

from realm_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", None, "Directory of blocks-*.tfrecord shards.", required=True)
flags.DEFINE_alias("corpus_dir", "corpus")
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries and exports.", required=True)
flags.DEFINE_string("vocab_file", "", "WordPiece vocabulary (default: MiniLM's uncased vocab).")
flags.DEFINE_enum("encoder", cli.DEFAULT_ENCODER, cli.ENCODERS, "BERT size.")
flags.DEFINE_string("init_weights", "minilm", "'', 'minilm', HF safetensors or TF1 BERT ckpt.")
flags.DEFINE_float("dropout", None, "Override the encoder dropout rate.")
flags.DEFINE_enum("retriever_head", "auto", cli.RETRIEVER_HEADS,
                  "New retrievers' head: 'realm' ([CLS] pooler, Dense, LayerNorm), 'sentence' "
                  "(mean pooling, unit length); 'auto': 'sentence' for --init_weights=minilm.")
flags.DEFINE_bool("share_towers", True, "One BERT for queries and blocks.")
flags.DEFINE_integer("num_steps", 1000, "Training steps.")
flags.DEFINE_integer("batch_size", 32, "Global batch (in-batch negatives).")
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
flags.DEFINE_integer("query_length", 64, "Pseudo-query length.")
flags.DEFINE_integer("block_length", 288, "Block length.")
flags.DEFINE_float("remove_prob", 0.9, "Probability of removing the query from its block.")
flags.DEFINE_integer("checkpoint_every", 100, "Steps between checkpoints.")
flags.DEFINE_integer("keep_checkpoints", 3, "Checkpoints kept (the newest).")
flags.DEFINE_enum("compute_dtype", "auto", cli.COMPUTE_DTYPES,
                  "Precision of the training step's matmuls (auto: bfloat16 on hardware with "
                  "bfloat16 matmuls, else float32; bfloat16: Keras mixed_bfloat16, float32 "
                  "variables and loss).")
flags.DEFINE_enum("strategy", "default", cli.STRATEGIES, "tf.distribute strategy.")
flags.DEFINE_string("tpu", "", "TPU address for --strategy=tpu.")
flags.DEFINE_integer("seed", 0, "Seed of the initialisers and the data order.")


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf import presets
  from realm_tf import pretrained
  from realm_tf.data.block_store import BlockStore
  from realm_tf.keras import keras
  from realm_tf.models import precision
  from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
  from realm_tf.training import distribute
  from realm_tf.training.ict_lib import IctConfig
  from realm_tf.training.ict_lib import train_ict
  # First: MultiWorkerMirroredStrategy configures collective ops before TensorFlow starts.
  strategy = distribute.build_strategy(FLAGS.strategy, FLAGS.tpu)
  keras.utils.set_random_seed(FLAGS.seed)
  tokenizer = (WordpieceTokenizer.from_vocab_file(FLAGS.vocab_file) if FLAGS.vocab_file
               else pretrained.minilm_tokenizer())
  with strategy.scope(), precision.policy_scope(FLAGS.compute_dtype):
    retriever = presets.build_retriever(
        presets.encoder_config(FLAGS.encoder, tokenizer.vocab_size, FLAGS.dropout),
        FLAGS.share_towers, FLAGS.init_weights, head=FLAGS.retriever_head)
  config = IctConfig(model_dir=FLAGS.model_dir, num_steps=FLAGS.num_steps,
                     batch_size=FLAGS.batch_size, learning_rate=FLAGS.learning_rate,
                     query_length=FLAGS.query_length, block_length=FLAGS.block_length,
                     remove_prob=FLAGS.remove_prob, checkpoint_every=FLAGS.checkpoint_every,
                     keep_checkpoints=FLAGS.keep_checkpoints, seed=FLAGS.seed)
  metrics, _ = train_ict(config, retriever, BlockStore.load(FLAGS.corpus), tokenizer,
                         strategy)
  print({k: round(v, 4) for k, v in metrics.items()})


def run():
  cli.run("realm-ict", main)


if __name__ == "__main__":
  run()
