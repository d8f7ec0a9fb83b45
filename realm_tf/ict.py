"""`realm-ict`: ICT warm-start of the retriever over a block corpus.

  realm-ict --corpus=corpus --model_dir=runs/ict --encoder=minilm_l6 --init_weights=minilm

The flags set the `ict` experiment (`realm_tf.experiments`; `realm-train --experiment=ict`).
"""
from absl import flags

from realm_tf import cli

flags.DEFINE_string("corpus", None, "Directory of blocks-*.tfrecord shards.", required=True)
flags.DEFINE_alias("corpus_dir", "corpus")
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries and exports.", required=True)
flags.DEFINE_string("vocab_file", "", "WordPiece vocabulary (default: MiniLM's uncased vocab).")
flags.DEFINE_enum("encoder", cli.DEFAULT_ENCODER, cli.ENCODERS, "BERT size.")
flags.DEFINE_string("init_weights", "minilm", "'', 'minilm', HF safetensors or TF1 BERT ckpt.")
flags.DEFINE_float("dropout", None, "Override the encoder dropout rate.",
                   lower_bound=0, upper_bound=1)
flags.DEFINE_enum("retriever_head", "auto", cli.RETRIEVER_HEADS,
                  "New retrievers' head: 'realm' ([CLS] pooler, Dense, LayerNorm), 'sentence' "
                  "(mean pooling, unit length); 'auto': 'sentence' for --init_weights=minilm.")
flags.DEFINE_bool("share_towers", True, "One BERT for queries and blocks.")
flags.DEFINE_integer("num_steps", 1000, "Training steps.", lower_bound=0)
flags.DEFINE_integer("batch_size", 32, "Global batch (in-batch negatives).", lower_bound=1)
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.", lower_bound=0)
flags.DEFINE_integer("query_length", 64, "Pseudo-query length.", lower_bound=3)
flags.DEFINE_integer("block_length", 288, "Block length.", lower_bound=4)
flags.DEFINE_float("remove_prob", 0.9, "Probability of removing the query from its block.",
                   lower_bound=0, upper_bound=1)
flags.DEFINE_integer("checkpoint_every", 100, "Steps between checkpoints.", lower_bound=1)
flags.DEFINE_integer("keep_checkpoints", 3, "Checkpoints kept (the newest).", lower_bound=1)
flags.DEFINE_enum("compute_dtype", "auto", cli.COMPUTE_DTYPES,
                  "Precision of the training step's matmuls (auto: bfloat16 on hardware with "
                  "bfloat16 matmuls, else float32; bfloat16: Keras mixed_bfloat16, float32 "
                  "variables and loss).")
flags.DEFINE_enum("strategy", "default", cli.STRATEGIES, "tf.distribute strategy.")
flags.DEFINE_string("tpu", "", "TPU address for --strategy=tpu.")
flags.DEFINE_integer("seed", 0, "Seed of the initialisers and the data order.", lower_bound=0)
cli.define_dev_recall_flags(eval_every=100)
flags.adopt_module_key_flags(cli)  # --dev_data, --eval_every ... in --help


# Each flag's setting in the `ict` experiment (`realm_tf.experiments`).
SETTINGS = {
    "corpus": "task.corpus", "model_dir": "trainer.model_dir", "vocab_file": "task.vocab_file",
    "encoder": "task.model.encoder", "init_weights": "task.init.bert_weights",
    "dropout": ("task.model.encoder.dropout_rate", "task.model.encoder.attention_dropout_rate"),
    "retriever_head": "task.model.retriever_head", "share_towers": "task.share_towers",
    "num_steps": "trainer.num_steps", "batch_size": "trainer.batch_size",
    "learning_rate": "trainer.learning_rate", "query_length": "task.model.query_length",
    "block_length": "task.model.block_length", "remove_prob": "task.remove_prob",
    "checkpoint_every": "trainer.checkpoint_every",
    "keep_checkpoints": "trainer.keep_checkpoints", "compute_dtype": "runtime.compute_dtype",
    "strategy": "runtime.strategy", "tpu": "runtime.tpu", "seed": "runtime.seed",
    "dev_data": "task.dev_data", "eval_every": "trainer.eval_every",
    "eval_max_examples": "trainer.eval_max_examples"}


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing: a fast --help)
  from realm_tf.experiments import overrides
  from realm_tf.experiments import registry
  from realm_tf.experiments.train_lib import run_experiment
  config = overrides.from_flags(registry.get("ict"), SETTINGS)
  metrics = run_experiment(config)
  print({k: round(v, 4) for k, v in metrics.items()})


def run():
  cli.run("realm-ict", main)


if __name__ == "__main__":
  run()
