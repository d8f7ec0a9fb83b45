"""Every TF Hub export is a Reusable SavedModel: inside a user's Keras model,
`hub.KerasLayer(path, trainable=True)` finds the export's weights and one gradient step changes
them and lowers the loss. The encoder exports give TF Hub's BERT-encoder outputs with a matching
text preprocessor, and the README's fine-tuning example runs (tiny towers)."""
# bazel-size: large
import dataclasses
import os
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub

from realm_tf import configs
from realm_tf.export.preprocessor import export_preprocessor
from realm_tf.export.query_embedder import export_query_embedder
from realm_tf.export.reader import export_reader
from realm_tf.export.realm_qa import export_realm_qa
from realm_tf.keras import keras
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.retrieve_and_read import RetrieveAndRead
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_texts
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization.featurizers import BlockFeaturizer
from realm_tf.tokenization.featurizers import QueryFeaturizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "on", "mat",
         "paris", "is", "in", "france", "who", "where", "a", "river", "flows", "?", "."]
TITLES = ["cat", "dog", "paris", "river"]
BODIES = ["the cat sat on the mat .", "the dog sat .", "paris is in france .",
          "a river flows in france ."]
QUESTIONS = ["who sat on the mat ?", "where is paris ?"]
LENGTHS = dict(query_length=12, block_length=16, reader_length=24)


def tiny_encoder(dropout_rate: float) -> configs.EncoderConfig:
  return dataclasses.replace(configs.EncoderConfig.tiny(vocab_size=len(VOCAB)),
                             dropout_rate=dropout_rate, attention_dropout_rate=dropout_rate)


@pytest.fixture(scope="module")
def models():
  """Tiny towers without dropout (a training step and an evaluation see the same loss)."""
  keras.utils.set_random_seed(0)
  tokenizer = WordpieceTokenizer(VOCAB)
  encoder = tiny_encoder(0.0)
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=encoder, projection_size=8, share_towers=False))
  retriever.build()
  reader = configs.build_reader(configs.ReaderConfig(encoder=encoder, span_hidden_size=8))
  reader.build()
  embeddings = embed_texts(DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id,
                                    tokenizer.pad_id, bucket=1),
                           tokenizer, TITLES, BODIES, batch_size=4)
  system = RetrieveAndRead(retriever, reader, tokenizer, BruteForceIndex(embeddings), TITLES,
                           BODIES, k=3, **LENGTHS)
  return tokenizer, retriever, reader, system, embeddings


@pytest.fixture(scope="module")
def hub_dir(models, tmp_path_factory):
  tokenizer, retriever, reader, system, embeddings = models
  base = str(tmp_path_factory.mktemp("hub"))
  path = lambda name: os.path.join(base, name)
  export_query_embedder(retriever, tokenizer, path("query_embedder"),
                        query_length=LENGTHS["query_length"])
  export_doc_embedder(retriever, path("doc_embedder"), tokenizer.cls_id, tokenizer.sep_id,
                      tokenizer.pad_id, block_length=LENGTHS["block_length"],
                      tokenizer=tokenizer)
  export_reader(reader, tokenizer, path("reader"), **LENGTHS)
  export_realm_qa(system, embeddings, path("realm_qa"))
  export_preprocessor(tokenizer, path("preprocessor"), seq_length=LENGTHS["query_length"])
  return base


def reader_inputs(system):
  _, query_ids = system.featurizer.questions(tf.constant(QUESTIONS))
  features = system.featurizer.reader_inputs(query_ids, tf.constant(TITLES[:2])[:, None],
                                             tf.constant(BODIES[:2])[:, None])
  return {n: features[n].numpy() for n in ("input_word_ids", "input_mask", "input_type_ids",
                                           "block_mask")}


def user_model(name: str, layer, system):
  """A user's Keras model around the export, its inputs, targets and loss."""
  keras.utils.set_random_seed(1)
  strings = keras.Input(shape=(), dtype=tf.string)
  head = keras.layers.Dense(2)
  cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  labels = np.array([0, 1])
  if name == "query_embedder":
    return (keras.Model(strings, head(layer(strings))), tf.constant(QUESTIONS), labels,
            cross_entropy)
  if name == "doc_embedder":
    inputs = {n: keras.Input(shape=(), dtype=tf.string, name=n) for n in ("titles", "texts")}
    data = {"titles": tf.constant(TITLES[:2]), "texts": tf.constant(BODIES[:2])}
    return keras.Model(inputs, head(layer(inputs))), data, labels, cross_entropy
  if name == "reader":
    data = reader_inputs(system)
    inputs = {n: keras.Input(shape=(LENGTHS["reader_length"],), dtype=tf.int32, name=n)
              for n in data}
    logits = layer(inputs)["span_logits"]
    # Targets: the lowest-scored span inside each block (a loss well above its minimum).
    scores = layer(data)["span_logits"].numpy()
    target = np.argmin(np.where(scores > -1e3, scores, np.inf), axis=1)
    return keras.Model(inputs, logits), data, target, cross_entropy
  # realm_qa: maximise the probability of each question's best (block, span).
  score = layer(strings)["score"]
  return (keras.Model(strings, score), tf.constant(QUESTIONS), np.ones(2, np.float32),
          lambda _, p: -tf.reduce_mean(tf.math.log(p)))


def export_weights(models, name):
  _, retriever, reader, _, _ = models
  return {"query_embedder": retriever.query_encoder.variables +
                            retriever.query_projection.variables,
          "doc_embedder": retriever.doc_encoder.variables + retriever.doc_projection.variables,
          "reader": reader.variables,
          "realm_qa": retriever.query_encoder.variables + retriever.query_projection.variables +
                      reader.encoder.variables + reader.span_scorer.variables}[name]


@pytest.mark.parametrize("name", ["query_embedder", "doc_embedder", "reader", "realm_qa"])
def test_one_gradient_step_through_keras_layer_fine_tunes_the_export(name, models, hub_dir):
  layer = hub.KerasLayer(os.path.join(hub_dir, name), trainable=True)
  weights = export_weights(models, name)
  assert len(layer.trainable_weights) == len(weights) > 0
  assert not layer.losses  # regularization_losses: none
  model, inputs, targets, loss = user_model(name, layer, models[3])
  # Small steps: the REALM head's LayerNorm (epsilon 1e-12) over the nearly equal pooled
  # outputs of freshly initialised tiny towers makes the loss very curved.
  model.compile(optimizer=keras.optimizers.SGD(1e-5), loss=loss)
  before = [w.numpy() for w in layer.trainable_weights]
  loss_before = model.evaluate(inputs, targets, verbose=0)
  model.train_on_batch(inputs, targets)
  loss_after = model.evaluate(inputs, targets, verbose=0)
  changed = [not np.array_equal(b, w.numpy()) for b, w in zip(before, layer.trainable_weights)]
  assert loss_after < loss_before, (loss_before, loss_after)
  assert sum(changed) > len(changed) // 2, f"{sum(changed)} of {len(changed)} weights changed"
  word_embeddings = [i for i, w in enumerate(layer.trainable_weights)
                     if "word_embeddings" in w.name]
  assert word_embeddings and all(changed[i] for i in word_embeddings)  # down to the embeddings


def test_encoder_outputs_and_preprocessor(models, hub_dir):
  tokenizer, retriever, _, _, _ = models
  preprocessor = hub.load(os.path.join(hub_dir, "preprocessor"))
  questions = tf.constant(QUESTIONS)
  features = preprocessor(questions)
  expected = QueryFeaturizer(tokenizer, seq_length=LENGTHS["query_length"])(questions)
  for n in expected:
    np.testing.assert_array_equal(features[n], expected[n])
  np.testing.assert_array_equal(
      preprocessor.signatures["serving_default"](texts=questions)["input_word_ids"],
      expected["input_word_ids"])
  assert preprocessor.tokenize(questions).to_list() == tokenizer(questions).to_list()
  np.testing.assert_array_equal(preprocessor.bert_pack_inputs([preprocessor.tokenize(questions)])
                                ["input_mask"], expected["input_mask"])

  query = hub.load(os.path.join(hub_dir, "query_embedder"))
  outputs = query(features)
  assert set(outputs) == {"pooled_output", "default", "sequence_output", "encoder_outputs",
                          "embeddings"}
  assert outputs["pooled_output"].shape == (2, 32)
  assert outputs["sequence_output"].shape == (2, LENGTHS["query_length"], 32)
  assert len(outputs["encoder_outputs"]) == 2
  np.testing.assert_array_equal(outputs["default"], outputs["pooled_output"])
  np.testing.assert_allclose(outputs["encoder_outputs"][-1], outputs["sequence_output"])
  np.testing.assert_allclose(outputs["embeddings"], retriever.embed_query(expected), atol=1e-5)
  np.testing.assert_allclose(query(questions), outputs["embeddings"], atol=1e-5)

  # Blocks: two segments packed at the block length feed the doc embedder.
  doc = hub.load(os.path.join(hub_dir, "doc_embedder"))
  block_length = tf.constant(LENGTHS["block_length"])
  blocks = preprocessor.bert_pack_inputs(
      [preprocessor.tokenize(tf.constant(TITLES)), preprocessor.tokenize(tf.constant(BODIES))],
      seq_length=block_length)
  expected = BlockFeaturizer(tokenizer, seq_length=LENGTHS["block_length"])(
      (tf.constant(TITLES), tf.constant(BODIES)))
  for n in expected:
    np.testing.assert_array_equal(blocks[n], expected[n])
  np.testing.assert_allclose(doc(blocks)["embeddings"], retriever.embed_documents(expected),
                             atol=1e-5)
  np.testing.assert_allclose(doc({"titles": tf.constant(TITLES), "texts": tf.constant(BODIES)}),
                             retriever.embed_documents(expected), atol=1e-5)


def test_training_argument_turns_dropout_on(models, tmp_path):
  tokenizer = models[0]
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=tiny_encoder(0.5),
                                                              projection_size=8))
  retriever.build()
  path = export_query_embedder(retriever, tokenizer, str(tmp_path / "query"), query_length=12)
  query = hub.load(path)
  questions = tf.constant(QUESTIONS)
  np.testing.assert_array_equal(query(questions), query(questions, training=False))
  assert not np.allclose(query(questions, training=True), query(questions))


README_SECTION = "# Open-QA: fine-tune, evaluate, export, ask"  # docs/open_qa.md
README_HUB_DIR = '"/tmp/realm_qa/hub"'


def test_readme_fine_tunes_the_query_tower(hub_dir):
  with open(os.path.join(ROOT, "docs", "open_qa.md"), encoding="utf-8") as f:
    readme = f.read()
  section = readme[readme.index(README_SECTION):]
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  assert README_HUB_DIR in code
  namespace = {}
  exec(code.replace(README_HUB_DIR, repr(hub_dir)), namespace)  # pylint: disable=exec-used
  encoder = namespace["encoder"]
  exported = hub.load(os.path.join(hub_dir, "query_embedder")).trainable_variables
  assert len(encoder.trainable_weights) == len(exported) > 0
  assert any(not np.allclose(w.numpy(), e.numpy())
             for w, e in zip(encoder.trainable_weights, exported))
