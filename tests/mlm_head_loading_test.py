"""The reader's MLM head from Google BERT TF1 checkpoints and HF safetensors (REALM §3.4: no cold
start), or left at its initialisation when the checkpoint has none."""
import logging
import math

import numpy as np
import pytest

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf.checkpoints import variable_maps

VOCAB = 64
TINY = configs.EncoderConfig.tiny(vocab_size=VOCAB)
HEAD = ("cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
        "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
        "cls/predictions/output_bias")


def _features(seed=0, shape=(2, 9)):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, VOCAB, shape).astype(np.int32)
  mask = np.ones(shape, np.int32)
  mask[:, -2:] = 0
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=np.zeros(shape, np.int32))


POSITIONS = np.array([[0, 3, 6], [1, 2, 5]], np.int32)  # Inside the unpadded tokens.


def _reader(config=TINY, seed=None):
  reader = configs.build_reader(configs.ReaderConfig(encoder=config, span_hidden_size=8))
  reader.build()
  if seed is not None:
    rng = np.random.default_rng(seed)
    for v in reader.encoder.weights + reader.masked_lm.weights:
      v.assign(rng.normal(0, 0.1, v.shape).astype(np.float32))
  return reader


def _head(reader):
  """The head's own variables (its `weights` include the tied word embeddings too)."""
  return [v for v in reader.masked_lm.weights if v is not reader.encoder.get_embedding_table()]


def _head_values(reader):
  return [v.numpy().copy() for v in _head(reader)]


def _tf1_checkpoint(tmp_path, reader, head=True, extra=None):
  """A Google BERT checkpoint: encoder, MLM head (optional), NSP head, optimizer state."""
  arrays = checkpoints.tf1_arrays(variable_maps.bert_map(reader.encoder))
  if head:
    arrays.update(checkpoints.tf1_arrays(variable_maps.mlm_head_map(reader)))
  arrays.update({"cls/seq_relationship/output_weights": np.zeros([2, 32], np.float32),
                 "cls/seq_relationship/output_bias": np.zeros([2], np.float32),
                 "bert/encoder/layer_0/output/dense/kernel/adam_m": np.zeros([64, 32], np.float32),
                 "global_step": np.array(7, np.int64)})
  arrays.update(extra or {})
  path = checkpoints.write_tf1_checkpoint(arrays, str(tmp_path / "bert" / "bert_model.ckpt"))
  return path, arrays


def _layer_norm(x, gamma, beta, epsilon=1e-12):
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def _gelu_tanh(x):
  return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def test_tf1_checkpoint_mlm_head_gives_the_checkpoint_logits(tmp_path):
  path, arrays = _tf1_checkpoint(tmp_path, _reader(seed=1))
  reader = _reader(seed=2)
  assert checkpoints.load_bert_reader(reader, path)
  # gelu(x W + b) -> LayerNorm -> . E^T + output_bias, from the checkpoint's numpy values.
  sequence = reader.sequence_output(_features(3)).numpy().astype(np.float64)
  x = np.take_along_axis(sequence, POSITIONS[..., None], axis=1)
  hidden = _gelu_tanh(x @ arrays[HEAD[0]] + arrays[HEAD[1]])
  hidden = _layer_norm(hidden, arrays[HEAD[2]], arrays[HEAD[3]])
  expected = hidden @ arrays["bert/embeddings/word_embeddings"].T + arrays[HEAD[4]]
  logits = reader.mlm_logits(_features(3), POSITIONS).numpy()
  assert logits.shape == (2, 3, VOCAB)
  np.testing.assert_allclose(logits, expected, atol=1e-4)
  # The decoder stays tied to the word embeddings.
  assert reader.masked_lm.embedding_table is reader.encoder.get_embedding_table()


def test_checkpoint_without_mlm_head_keeps_the_initial_head(tmp_path, caplog):
  path, _ = _tf1_checkpoint(tmp_path, _reader(seed=1), head=False)
  reader = _reader(seed=2)
  before = _head_values(reader)
  checkpoints.load_bert_checkpoint(reader.encoder, path)
  # absl's logger may have been set to WARNING by an earlier test: set it, not only the root.
  with caplog.at_level(logging.INFO, logger="absl"):
    assert not checkpoints.load_mlm_head(reader, path)
  for value, variable in zip(before, _head(reader)):
    np.testing.assert_array_equal(variable.numpy(), value)
  assert sum("has no MLM head" in r.getMessage() for r in caplog.records) == 1


def test_mis_shaped_mlm_head_names_the_variable_and_both_shapes(tmp_path):
  path, _ = _tf1_checkpoint(tmp_path, _reader(seed=1))
  wider = _reader(configs.EncoderConfig.tiny(vocab_size=80), seed=2)
  before = _head_values(wider)
  with pytest.raises(checkpoints.CheckpointMismatchError,
                     match=r"shape mismatch[\s\S]*cls/predictions/output_bias: checkpoint \[64\] "
                           r"vs model \[80\]"):
    checkpoints.load_mlm_head(wider, path)
  for value, variable in zip(before, _head(wider)):
    np.testing.assert_array_equal(variable.numpy(), value)


def test_partial_mlm_head_is_rejected(tmp_path):
  """An output bias without the transform is a broken head, not a missing one."""
  path, _ = _tf1_checkpoint(tmp_path, _reader(seed=1), head=False,
                            extra={"cls/predictions/output_bias": np.zeros([VOCAB], np.float32)})
  with pytest.raises(checkpoints.CheckpointMismatchError,
                     match=r"missing[\s\S]*cls/predictions/transform/dense/kernel"):
    checkpoints.load_mlm_head(_reader(), path)


def test_prefixed_mlm_head(tmp_path):
  source = _reader(seed=1)
  arrays = checkpoints.tf1_arrays(variable_maps.mlm_head_map(source, "module/cls/predictions/"))
  arrays["module/bert/embeddings/word_embeddings"] = np.zeros([VOCAB, 32], np.float32)
  path = checkpoints.write_tf1_checkpoint(arrays, str(tmp_path / "realm" / "model.ckpt"))
  reader = _reader(seed=2)
  assert checkpoints.load_mlm_head(reader, path, prefix="module/cls/predictions/")
  for expected, variable in zip(_head_values(source), _head(reader)):
    np.testing.assert_array_equal(variable.numpy(), expected)


def _hf_masked_lm(tmp_path, seed=0):
  """A tiny random HF BertForMaskedLM saved as safetensors, and the same-shaped config of ours."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  torch.manual_seed(seed)
  model = transformers.BertForMaskedLM(transformers.BertConfig(
      vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
      intermediate_size=64, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).eval()
  with torch.no_grad():  # Every parameter away from its initial value (LayerNorm 1/0, bias 0).
    for parameter in model.parameters():
      parameter.add_(0.1 * torch.randn_like(parameter))
  model.save_pretrained(str(tmp_path / "hf"), safe_serialization=True)
  config = configs.EncoderConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2,
                                 num_attention_heads=4, intermediate_size=64, hidden_act="gelu")
  return model, str(tmp_path / "hf"), config


def test_hf_bert_for_masked_lm_gives_the_transformers_logits(tmp_path):
  torch = pytest.importorskip("torch")
  model, path, config = _hf_masked_lm(tmp_path)
  reader = _reader(config, seed=2)
  pooler = [v.numpy().copy() for v in reader.encoder.pooler_layer.weights]
  assert checkpoints.load_bert_reader(reader, path)  # BertForMaskedLM has no pooler.
  for value, variable in zip(pooler, reader.encoder.pooler_layer.weights):
    np.testing.assert_array_equal(variable.numpy(), value)
  features = _features(4)
  with torch.no_grad():
    out = model(input_ids=torch.tensor(features["input_word_ids"], dtype=torch.long),
                attention_mask=torch.tensor(features["input_mask"], dtype=torch.long),
                token_type_ids=torch.tensor(features["input_type_ids"], dtype=torch.long))
  expected = np.take_along_axis(out.logits.numpy(), POSITIONS[..., None], axis=1)
  np.testing.assert_allclose(reader.mlm_logits(features, POSITIONS).numpy(), expected,
                             atol=1e-4)


def test_hf_decoder_bias_name_and_untied_decoder(tmp_path):
  """`cls.predictions.decoder.bias` serves as the output bias; a decoder weight that is not the
  word embeddings cannot be tied and is rejected."""
  from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
  _, path, config = _hf_masked_lm(tmp_path)
  tensors = safetensors_numpy.load_file(checkpoints.hf_safetensors.resolve_safetensors_path(path))
  bias = tensors.pop("cls.predictions.bias")
  tensors["cls.predictions.decoder.bias"] = bias
  renamed = str(tmp_path / "renamed.safetensors")
  safetensors_numpy.save_file(tensors, renamed)
  reader = _reader(config, seed=2)
  assert checkpoints.load_mlm_head(reader, renamed)
  np.testing.assert_array_equal(reader.masked_lm.bias.numpy(), bias)

  tensors["cls.predictions.decoder.weight"] = np.ones([VOCAB, 32], np.float32)
  untied = str(tmp_path / "untied.safetensors")
  safetensors_numpy.save_file(tensors, untied)
  with pytest.raises(checkpoints.CheckpointMismatchError,
                     match=r"unexpected[\s\S]*cls\.predictions\.decoder\.weight"):
    checkpoints.load_mlm_head(reader, untied)


def test_hf_bert_model_without_head_keeps_the_initial_head(tmp_path):
  torch = pytest.importorskip("torch")
  model, _, config = _hf_masked_lm(tmp_path)
  torch_path = str(tmp_path / "bare")
  model.bert.save_pretrained(torch_path, safe_serialization=True)  # BertModel: no `cls.`.
  reader = _reader(config, seed=2)
  before = _head_values(reader)
  assert not checkpoints.load_bert_reader(reader, torch_path)
  for value, variable in zip(before, _head(reader)):
    np.testing.assert_array_equal(variable.numpy(), value)
