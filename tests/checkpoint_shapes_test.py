"""Checkpoint shapes are compared exactly in every loader: a transposed dense kernel (same
element count) is a `CheckpointMismatchError` naming the checkpoint, the variable and both
shapes; the only reshape allowed is the TF1 layout of the attention projections."""
import re

import numpy as np
import pytest

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf import errors
from realm_tf.checkpoints import variable_maps

TINY = configs.EncoderConfig.tiny(vocab_size=64)
KERNEL = "encoder/layer_0/intermediate/dense/kernel"  # [hidden 32, intermediate 64]


def _features():
  ids = np.random.default_rng(0).integers(5, 64, (2, 9)).astype(np.int32)
  return dict(input_word_ids=ids, input_mask=np.ones_like(ids), input_type_ids=np.zeros_like(ids))


def _encoder():
  encoder = configs.build_encoder(TINY)
  encoder(_features())
  return encoder


def _reader():
  reader = configs.build_reader(configs.ReaderConfig(encoder=TINY, span_hidden_size=8))
  reader.build()
  return reader


def _retriever():
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=TINY, projection_size=8))
  retriever.embed_query(_features())
  return retriever


def _hf_name(tf1_name: str) -> str:
  """HF BertModel's name of a TF1 BERT name (`bert/` dropped)."""
  name = tf1_name[len("bert/"):]
  name = re.sub(r"layer_(\d+)", r"layer.\1", name).replace("/", ".")
  name = re.sub(r"\.(kernel|gamma)$", ".weight", name)
  name = re.sub(r"\.beta$", ".bias", name)
  return name if name.endswith((".weight", ".bias")) else name + ".weight"


def _hf_safetensors(directory, arrays):
  """`arrays` (TF1 BERT names) as HF safetensors: kernels as [out, in]."""
  from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
  path = str(directory / "model.safetensors")
  safetensors_numpy.save_file(
      {_hf_name(n): np.ascontiguousarray(a.T if n.endswith("/kernel") else a)
       for n, a in arrays.items()}, path)
  return path


def _tf1(directory, arrays):
  return checkpoints.write_tf1_checkpoint(arrays, str(directory / "model.ckpt"))


# (loader, variable map of the model it loads, prefix of the TF1 BERT names, writer)
CASES = {
    "tf1_bert": (lambda: _encoder(), variable_maps.bert_map, checkpoints.load_bert_checkpoint,
                 "bert/", _tf1),
    "tf1_realm_encoder": (_reader, variable_maps.realm_encoder_map,
                          checkpoints.load_realm_encoder, "bert/", _tf1),
    "tf1_realm_embedder": (_retriever, variable_maps.realm_embedder_map,
                           checkpoints.load_realm_embedder, "module/module/module/bert/", _tf1),
    "tf1_orqa": (lambda: (_retriever(), _reader()), lambda models: variable_maps.orqa_map(*models),
                 lambda models, path: checkpoints.load_orqa(*models, path),
                 "reader/module/bert/", _tf1),
    "hf_safetensors": (lambda: _encoder(), variable_maps.bert_map, checkpoints.load_hf_bert,
                       "bert/", _hf_safetensors),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("fault", ["transposed_kernel", "flattened_attention_kernel"])
def test_mis_shaped_variable_is_named_with_both_shapes(tmp_path, case, fault):
  build, variable_map, load, prefix, write = CASES[case]
  arrays = checkpoints.tf1_arrays(variable_map(build()))
  if fault == "transposed_kernel":
    name = prefix + KERNEL
    arrays[name] = arrays[name].T.copy()  # [64, 32]: the element count of [32, 64]
    found, expected = "[64, 32]", "[32, 64]"
  else:  # the same elements as the allowed [32, 32], in a layout no release has
    name = prefix + "encoder/layer_1/attention/self/query/kernel"
    arrays[name] = arrays[name].reshape(-1)
    found, expected = "[1024]", "[32, 4, 8]"
  path = write(tmp_path, arrays)
  with pytest.raises(checkpoints.CheckpointMismatchError) as error:
    load(build(), path)
  assert isinstance(error.value, errors.InputError)
  first_line = errors.one_line(error.value)
  assert first_line.startswith(f"{path}: checkpoint does not fit the model (shape mismatch: ")
  assert f"{name}: checkpoint {found} vs model {expected}" in first_line
  assert "1 problem in all" in first_line


@pytest.mark.parametrize("case", sorted(CASES))
def test_released_layouts_still_load(tmp_path, case):
  """Attention kernels [H, H] / [H, heads, head_dim] both load; a round trip is exact."""
  build, variable_map, load, _, write = CASES[case]
  source = build()
  arrays = checkpoints.tf1_arrays(variable_map(source))
  target = build()
  load(target, write(tmp_path, arrays))
  loaded = checkpoints.tf1_arrays(variable_map(target))
  for name, value in arrays.items():
    np.testing.assert_array_equal(loaded[name], value, err_msg=name)


def test_allowed_shapes_are_exact():
  assert checkpoints.tf1_checkpoint.allowed_shapes(
      "bert/encoder/layer_0/attention/self/key/kernel", [32, 4, 8]) == [(32, 4, 8), (32, 32)]
  assert checkpoints.tf1_checkpoint.allowed_shapes(
      "bert/encoder/layer_0/attention/self/key/bias", [4, 8]) == [(4, 8), (32,)]
  assert checkpoints.tf1_checkpoint.allowed_shapes(
      "bert/encoder/layer_0/attention/output/dense/kernel", [4, 8, 32]) == [(4, 8, 32), (32, 32)]
  assert checkpoints.tf1_checkpoint.allowed_shapes("bert/" + KERNEL, [32, 64]) == [(32, 64)]
