"""The one block-embedding function: length bucketing, order, XLA, both towers, texts."""
import numpy as np
import pytest

from realm_tf import configs
from realm_tf import tiny_world
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import ExportTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.retrieval.embedding import embed_texts
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization.bert_packer import BertPacker
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
import tiny_models
from tiny_models import BODIES
from tiny_models import TEXT_VOCAB
from tiny_models import TITLES


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  store, tok = tiny_world.write_pipeline(str(tmp_path_factory.mktemp("world")))
  return store, tok, tiny_models.retriever()


@pytest.fixture(scope="module")
def text_system():
  tokenizer = WordpieceTokenizer(TEXT_VOCAB)
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=len(TEXT_VOCAB)), projection_size=8))
  tower = DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, bucket=1)
  return tokenizer, retriever, tower


def test_bucketed_embedding_keeps_store_order_and_values(world):
  store, tok, retriever = world
  tower = DocTower(retriever, tok.cls_id, tok.sep_id, tok.pad_id, block_length=24, bucket=4)
  embeddings = embed_blocks(tower, store.title_ids, store.body_ids, batch_size=5)
  packer = BertPacker(24, tok.cls_id, tok.sep_id, tok.pad_id)
  for row in (0, 7, 15):
    features = packer((store.title_ids.gather([row]), store.body_ids.gather([row])))
    expected = retriever.embed_documents(features).numpy()[0]
    np.testing.assert_allclose(embeddings[row], expected, atol=1e-5)


def test_xla_embedding_pads_the_last_batch_and_matches(world):
  store, tok, retriever = world
  special = (tok.cls_id, tok.sep_id, tok.pad_id)
  plain = embed_blocks(DocTower(retriever, *special, block_length=24, bucket=8),
                       store.title_ids, store.body_ids, batch_size=7)
  assert len(store) % 7  # a short last batch, padded under XLA
  xla = embed_blocks(DocTower(retriever, *special, block_length=24, bucket=8, jit_compile=True),
                     store.title_ids, store.body_ids, batch_size=7)
  np.testing.assert_allclose(xla, plain, atol=1e-5)


def test_export_tower_matches_the_export_signature_and_the_keras_tower(world, tmp_path):
  store, tok, retriever = world
  special = (tok.cls_id, tok.sep_id, tok.pad_id)
  exported = DocEmbedder(export_doc_embedder(retriever, str(tmp_path / "doc"), *special,
                                             block_length=24, tokenizer=tok))
  counted = []
  ours = embed_blocks(ExportTower(exported), store.title_ids, store.body_ids, batch_size=64,
                      progress=counted.append)
  assert counted == [len(store)]
  np.testing.assert_array_equal(ours, exported.embed_blocks(store.title_ids, store.body_ids))
  keras_tower = embed_blocks(DocTower(retriever, *special, block_length=24), store.title_ids,
                             store.body_ids)
  np.testing.assert_allclose(ours, keras_tower, atol=1e-5)
  texts = embed_texts(ExportTower(exported), exported.tokenizer(), store.titles, store.texts)
  np.testing.assert_allclose(texts, exported.embed_texts(store.titles, store.texts), atol=1e-5)


def test_texts_batched_match_one_by_one(text_system):
  tokenizer, _, tower = text_system
  embeddings = embed_texts(tower, tokenizer, TITLES, BODIES, batch_size=4)
  assert embeddings.shape == (6, 8)
  one_by_one = np.concatenate([embed_texts(tower, tokenizer, [t], [b], batch_size=1)
                               for t, b in zip(TITLES, BODIES)])
  np.testing.assert_allclose(embeddings, one_by_one, atol=1e-5)
  assert embed_texts(tower, tokenizer, [], []).shape == (0, 8)


def test_empty_over_long_and_invalid_utf8_blocks_embed_finitely(text_system):
  tokenizer, _, tower = text_system
  bodies = ["", "the cat sat on the mat . " * 5000, b"paris \xff\xfe is".decode("latin-1"),
            "paris is in france ."]
  embeddings = embed_texts(tower, tokenizer, ["", "cat", "paris", ""], bodies, batch_size=2)
  assert embeddings.shape == (4, 8) and np.isfinite(embeddings).all()
  raw = embed_texts(tower, tokenizer, [b"paris \xff"], [b"\xc3\x28 is"], batch_size=1)
  assert np.isfinite(raw).all()


class _CountingTower(DocTower):
  """A DocTower that counts the batches it embeds."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.batches = 0

  def __call__(self, features):
    self.batches += 1
    return super().__call__(features)


def test_a_corpus_embedded_again_by_the_same_doc_tower_is_reused(world):
  store, tok, retriever = world
  special = (tok.cls_id, tok.sep_id, tok.pad_id)
  twin = tiny_models.retriever()
  twin.set_weights(retriever.get_weights())  # another model with the same weights
  first = embed_blocks(DocTower(retriever, *special, block_length=24), store.title_ids,
                       store.body_ids)
  tower = _CountingTower(twin, *special, block_length=24)
  done = []
  again = embed_blocks(tower, store.title_ids, store.body_ids, progress=done.append)
  assert tower.batches == 0 and sum(done) == len(store)
  np.testing.assert_array_equal(again, first)
  again[0] = 0.0  # the caller's copy: the memo is unchanged
  np.testing.assert_array_equal(embed_blocks(tower, store.title_ids, store.body_ids), first)

  for other in (dict(block_length=16), dict(block_length=24, bucket=8)):  # other packing
    other_tower = _CountingTower(twin, *special, **other)
    embed_blocks(other_tower, store.title_ids, store.body_ids)
    assert other_tower.batches > 0
  fewer = embed_blocks(tower, store.title_ids[:5], store.body_ids[:5])  # other blocks
  assert tower.batches == 1 and fewer.shape[0] == 5
  weights = twin.get_weights()
  twin.set_weights([w + 0.01 for w in weights])  # trained further: embedded again
  changed = embed_blocks(tower, store.title_ids, store.body_ids)
  assert tower.batches > 1 and not np.allclose(changed, first)
  twin.set_weights(weights)
