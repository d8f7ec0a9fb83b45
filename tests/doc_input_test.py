"""`doc_input`: the doc tower reads `[CLS] title [SEP] body [SEP]` or `[CLS] body [SEP]`, in
every embedder (the featurizer, the in-process tower, the export), the retriever and its
configs carry it, and an index of the other form is refused."""
import json

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import configs
from realm_tf import errors
from realm_tf import presets
from realm_tf.experiments.base_task import PreviousRun
from realm_tf.models.retriever import Retriever
from realm_tf.qa.doc_index import DocIndex
from realm_tf.qa.doc_index import index_corpus
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import ExportTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_attributes
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization import doc_input
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import run_config

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(25)]
PAD, CLS, SEP = 0, 2, 3
TITLES = ["w0 w1", "", "w2", "w3 w4 w5", "w6"]
BODIES = ["w7 w8 w9", "w10 w11", "w12 w13 w14 w15 w16 w17 w18 w19", "w20", "w21 w22 w23 w24"]


@pytest.fixture(scope="module")
def tokenizer():
  return WordpieceTokenizer(VOCAB)


def _retriever(form: str) -> Retriever:
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=len(VOCAB)), projection_size=8,
      doc_input=form))
  retriever.build()
  return retriever


@pytest.fixture(scope="module")
def towers():
  """A "body" retriever and a "title_body" one with the same weights."""
  body = _retriever("body")
  title_body = _retriever("title_body")
  title_body.set_weights(body.get_weights())
  return body, title_body


@pytest.fixture(scope="module")
def corpus(tokenizer):
  ids = lambda texts: tokenizer(tf.constant(texts)).to_list()
  return Corpus.from_blocks(list(range(len(TITLES))), TITLES, BODIES, ids(TITLES), ids(BODIES))


def _packed(features):
  return {n: t.numpy().tolist() for n, t in features.items()}


def test_both_forms_pack_as_built_by_hand(tokenizer):
  titles = tf.ragged.constant([[5, 6], [], [7, 8, 9, 10, 11, 12]], tf.int32)
  bodies = tf.ragged.constant([[20, 21], [22, 23, 24], [25, 26, 27]], tf.int32)
  title_body = _packed(Featurizer(tokenizer, block_length=8).pack_blocks(titles, bodies))
  assert title_body["input_word_ids"] == [
      [CLS, 5, 6, SEP, 20, 21, SEP, PAD],
      [CLS, SEP, 22, 23, 24, SEP, PAD, PAD],  # no title: [CLS] [SEP] body [SEP]
      [CLS, 7, 8, 9, 10, 11, SEP, SEP]]  # the title first: the body is cut away
  assert title_body["input_type_ids"] == [[0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1, 0, 0],
                                          [0, 0, 0, 0, 0, 0, 0, 1]]
  body = _packed(Featurizer(tokenizer, block_length=8, doc_input="body").pack_blocks(
      titles, bodies))
  assert body["input_word_ids"] == [[CLS, 20, 21, SEP, PAD, PAD, PAD, PAD],
                                    [CLS, 22, 23, 24, SEP, PAD, PAD, PAD],
                                    [CLS, 25, 26, 27, SEP, PAD, PAD, PAD]]  # titles ignored
  assert body["input_type_ids"] == [[0] * 8] * 3
  assert body["input_mask"] == [[1] * 4 + [0] * 4, [1] * 5 + [0] * 3, [1] * 5 + [0] * 3]
  long_body = tf.ragged.constant([list(range(5, 15))], tf.int32)  # 10 wordpieces into 8
  cut = _packed(Featurizer(tokenizer, block_length=8, doc_input="body").pack_blocks(
      tf.ragged.constant([[5]], tf.int32), long_body))
  assert cut["input_word_ids"] == [[CLS, 5, 6, 7, 8, 9, 10, SEP]]
  texts = Featurizer(tokenizer, block_length=8, doc_input="body").blocks(
      tf.constant(["w0 w1"]), tf.constant(["w15 w16"]))
  assert texts["input_word_ids"].numpy().tolist() == [[CLS, 20, 21, SEP, PAD, PAD, PAD, PAD]]


def test_the_reader_input_does_not_depend_on_doc_input(tokenizer):
  query_ids = tf.ragged.constant([[5], [6, 7]], tf.int32)
  titles = tf.constant([["w8", "w9"], ["", "w10"]])
  texts = tf.constant([["w11 w12", "w13"], ["w14", "w15 w16 w17"]])
  read = [_packed(Featurizer(tokenizer, 4, 8, doc_input=form).reader_inputs(
      query_ids, titles, texts)) for form in doc_input.DOC_INPUTS]
  assert read[0] == read[1]


def test_the_retriever_and_its_configs_carry_it():
  retriever = _retriever("body")
  config = retriever.get_config()
  assert config["doc_input"] == "body"
  assert Retriever.from_config(config).doc_input == "body"
  del config["doc_input"]  # a retriever saved before the setting
  assert Retriever.from_config(config).doc_input == "title_body"
  model = presets.ModelConfig(encoder=configs.EncoderConfig.tiny(), doc_input="body")
  assert presets.ModelConfig.from_dict(json.loads(json.dumps(model.to_dict()))) == model
  assert presets.build_models(model)[0].doc_input == "body"
  default = presets.ModelConfig().to_dict()
  assert "doc_input" not in default  # model.json of title_body models as before
  assert presets.ModelConfig.from_dict(default).doc_input == "title_body"
  with pytest.raises(ValueError, match="doc_input must be one of"):
    presets.ModelConfig(doc_input="title")
  assert "doc_input" not in run_config.retriever_structure(_retriever("title_body"))
  structure = {"task": "ict", "retriever": run_config.retriever_structure(retriever)}
  assert PreviousRun("dir", "dir/checkpoints", structure).doc_input == "body"


def test_the_tower_and_the_export_embed_in_the_retrievers_form(towers, tokenizer, corpus,
                                                               tmp_path):
  body, title_body = towers
  special = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  titles, bodies = corpus.wordpieces(tokenizer)
  in_process = embed_blocks(DocTower(body, *special, block_length=8, bucket=4), titles, bodies)
  by_hand = body.embed_documents(Featurizer(tokenizer, block_length=8, doc_input="body")
                                 .pack_blocks(titles.gather(range(5)), bodies.gather(range(5))))
  np.testing.assert_allclose(in_process, by_hand.numpy(), atol=1e-5)
  path = export_doc_embedder(body, str(tmp_path / "body"), *special, block_length=8,
                             tokenizer=tokenizer, length_multiple=4)
  assert export_attributes(path).doc_input == "body"
  exported = DocEmbedder(path)
  np.testing.assert_allclose(embed_blocks(ExportTower(exported), titles, bodies), in_process,
                             atol=1e-5)
  np.testing.assert_allclose(exported.embed_texts(TITLES, BODIES), in_process, atol=1e-5)
  with_titles = embed_blocks(DocTower(title_body, *special, block_length=8, bucket=4), titles,
                             bodies)
  titled = [row for row, title in enumerate(TITLES) if title]
  assert not np.allclose(with_titles[titled], in_process[titled], atol=1e-3)
  untitled = TITLES.index("")  # [CLS] [SEP] body [SEP] is still not [CLS] body [SEP]
  assert not np.allclose(with_titles[untitled], in_process[untitled], atol=1e-3)


def test_an_index_of_the_other_form_is_refused(towers, tokenizer, corpus, tmp_path):
  body, title_body = towers
  special = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  embedders = {form: DocEmbedder(export_doc_embedder(
      retriever, str(tmp_path / form), *special, block_length=8, tokenizer=tokenizer))
      for form, retriever in (("body", body), ("title_body", title_body))}
  index = DocIndex.build(embedders["body"], corpus, kind="brute_force")
  assert index.doc_input == "body"
  index.save(str(tmp_path / "index"))
  assert DocIndex.read_info(str(tmp_path / "index"))["doc_input"] == "body"
  assert DocIndex.load(str(tmp_path / "index"), corpus).doc_input == "body"
  reused = index_corpus(embedders["body"], corpus, str(tmp_path / "index"), kind="brute_force")
  np.testing.assert_array_equal(reused.embeddings, index.embeddings)
  with pytest.raises(errors.EmbeddingMismatchError) as refused:
    index_corpus(embedders["title_body"], corpus, str(tmp_path / "index"), kind="brute_force")
  message = str(refused.value)
  assert "\n" not in message
  assert message.startswith(str(tmp_path / "index"))
  assert "doc_input='body'" in message and "doc_input='title_body'" in message
  assert "Rebuild the index" in message
  titled = DocIndex.build(embedders["title_body"], corpus, kind="brute_force")
  assert "doc_input" not in titled.metadata()  # title_body indexes' metadata as before
