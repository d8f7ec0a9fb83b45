"""Length-bucketed store embedding equals embedding every block alone at full length."""
import numpy as np

import tiny_world
from realm_tf import configs
from realm_tf.tokenization.bert_packer import BertPacker
from realm_tf.training.store_embedding import embed_store


def test_bucketed_embedding_keeps_store_order_and_values(tmp_path):
  store, tok = tiny_world.write_world(str(tmp_path))
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=len(tiny_world.VOCAB)), projection_size=8))
  retriever.build()
  embeddings = embed_store(retriever, store, tok.cls_id, tok.sep_id, tok.pad_id,
                           block_length=24, batch_size=5, bucket=4)
  packer = BertPacker(24, tok.cls_id, tok.sep_id, tok.pad_id)
  for row in (0, 7, 15):
    features = packer((store.title_ids[row:row + 1], store.body_ids[row:row + 1]))
    expected = retriever.embed_documents(features).numpy()[0]
    np.testing.assert_allclose(embeddings[row], expected, atol=1e-5)


def test_xla_embedding_pads_the_last_batch_and_matches(tmp_path):
  store, tok = tiny_world.write_world(str(tmp_path))
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=len(tiny_world.VOCAB)), projection_size=8))
  retriever.build()
  args = (retriever, store, tok.cls_id, tok.sep_id, tok.pad_id)
  plain = embed_store(*args, block_length=24, batch_size=7, bucket=8)
  assert len(store) % 7  # a short last batch, padded under XLA
  xla = embed_store(*args, block_length=24, batch_size=7, bucket=8, jit_compile=True)
  np.testing.assert_allclose(xla, plain, atol=1e-5)
