"""The doc-embedder export gives the Keras model's embeddings after a reload, also when one
exporter writes the same retriever again after its weights changed (the refreshers' snapshots)."""
import numpy as np
import tensorflow as tf

from realm_tf import configs
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import DocEmbedderExporter
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization import WordpieceTokenizer
from realm_tf.tokenization.bert_packer import BertPacker


def test_export_round_trip(tmp_path):
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=40), projection_size=8, share_towers=False))
  retriever.build()
  path = export_doc_embedder(retriever, str(tmp_path / "doc"), cls_id=2, sep_id=3, pad_id=0,
                             block_length=12, snapshot_step=42)
  embedder = DocEmbedder(path)
  assert (embedder.embedding_dim, embedder.block_length, embedder.snapshot_step) == (8, 12, 42)
  titles = tf.ragged.constant([[5, 6], [7], []], dtype=tf.int64)
  bodies = tf.ragged.constant([[8, 9, 10], [11] * 30, [12]], dtype=tf.int64)
  features = BertPacker(seq_length=12, cls_id=2, sep_id=3, pad_id=0)(
      (tf.cast(titles, tf.int32), tf.cast(bodies, tf.int32)))
  expected = retriever.embed_documents(features).numpy()
  np.testing.assert_allclose(embedder.embed_blocks(titles, bodies), expected, atol=1e-5)
  np.testing.assert_allclose(embedder.embed_features(features), expected, atol=1e-5)
  assert not np.allclose(retriever.embed_query(features), expected)  # the doc tower is exported


def test_xla_export_pads_to_the_length_multiple(tmp_path):
  tokenizer = WordpieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                                 [f"w{i}" for i in range(35)])
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=40), projection_size=8))
  retriever.build()
  path = export_doc_embedder(retriever, str(tmp_path / "doc"), cls_id=2, sep_id=3, pad_id=0,
                             block_length=16, length_multiple=4, jit_compile=True,
                             tokenizer=tokenizer)
  embedder = DocEmbedder(path)
  assert (embedder.jit_compile, embedder.length_multiple) == (True, 4)
  np.testing.assert_allclose(  # the text path: w0 w1 -> ids 5, 6
      embedder.embed_texts(["w0"], ["w1 w2"]),
      embedder.embed_blocks(tf.ragged.constant([[5]], tf.int64),
                            tf.ragged.constant([[6, 7]], tf.int64)), atol=1e-5)
  titles = tf.ragged.constant([[5], [6, 7]], dtype=tf.int64)
  packer = BertPacker(seq_length=16, cls_id=2, sep_id=3, pad_id=0)
  for body_length in (1, 2, 5, 13):  # packed lengths 5..16: padded to 8, 8, 12, 16
    bodies = tf.ragged.constant([[9] * body_length, [10, 11]], dtype=tf.int64)
    expected = retriever.embed_documents(
        packer((tf.cast(titles, tf.int32), tf.cast(bodies, tf.int32)))).numpy()
    np.testing.assert_allclose(embedder.embed_blocks(titles, bodies), expected, atol=1e-5)


def test_one_exporter_writes_each_exports_current_weights(tmp_path):
  """The refreshers' snapshots: the module is traced once, each export holds the retriever's
  weights and step at that export (also through the bfloat16 copy, which does not follow the
  retriever's updates by itself)."""
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=40), projection_size=8, share_towers=False))
  retriever.build()
  titles = tf.ragged.constant([[5, 6], [7]], dtype=tf.int64)
  bodies = tf.ragged.constant([[8, 9, 10], [11] * 30], dtype=tf.int64)
  features = BertPacker(seq_length=12, cls_id=2, sep_id=3, pad_id=0)(
      (tf.cast(titles, tf.int32), tf.cast(bodies, tf.int32)))
  for dtype, atol in (("float32", 1e-5), ("bfloat16", 5e-2)):
    exporter = DocEmbedderExporter(retriever, 2, 3, 0, block_length=12, compute_dtype=dtype)
    embedded = []
    for step in (1, 2):
      if step == 2:  # a training update between the snapshots
        retriever.doc_projection.set_weights(
            [w * 1.5 for w in retriever.doc_projection.get_weights()])
      embedder = DocEmbedder(exporter.export(str(tmp_path / f"{dtype}-{step}"), step))
      assert embedder.snapshot_step == step
      expected = retriever.embed_documents(features).numpy()
      embedded.append(embedder.embed_blocks(titles, bodies))
      np.testing.assert_allclose(embedded[-1], expected, atol=atol, rtol=0.02)
    exporter.close()
    assert not np.allclose(embedded[0], embedded[1], atol=atol)
