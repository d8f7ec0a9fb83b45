"""bfloat16 document embedding: same weights, float32 outputs close to float32 compute."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import emulation
from realm_tf import configs
from realm_tf import tiny_world
from realm_tf.keras import keras
from realm_tf.models import precision
from realm_tf.models.precision import with_compute_dtype
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_doc_embedder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  store, tok = tiny_world.write_pipeline(str(tmp_path_factory.mktemp("world")))
  tf.keras.utils.set_random_seed(0)
  # A wide init, so that blocks get distinct embeddings (narrow random towers give every
  # block nearly the same [CLS] vector, and nearest neighbours would be noise).
  encoder = dataclasses.replace(
      configs.EncoderConfig.tiny(vocab_size=len(tiny_world.VOCAB)), initializer_range=0.2)
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=encoder,
                                                              projection_size=8))
  retriever.build()
  return store, tok, retriever


def _cosines(a, b):
  return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@emulation.bf16_compute
def test_bfloat16_copy_shares_weights_and_leaves_the_original(world):
  _, _, retriever = world
  copy = with_compute_dtype(retriever, "bfloat16")
  assert copy.doc_encoder.compute_dtype == "bfloat16"
  assert retriever.doc_encoder.compute_dtype == "float32"
  assert keras.mixed_precision.global_policy().name == "float32"
  for ours, theirs in zip(retriever.get_weights(), copy.get_weights()):
    np.testing.assert_array_equal(ours, theirs)
  assert with_compute_dtype(retriever, "float32") is retriever
  with pytest.raises(ValueError, match="compute_dtype must be one of"):
    with_compute_dtype(retriever, "float16")


@emulation.bf16_compute
def test_bfloat16_store_embedding_is_close_to_float32(world):
  store, tok, retriever = world
  special = (tok.cls_id, tok.sep_id, tok.pad_id)
  full = embed_blocks(DocTower(retriever, *special, block_length=24), store.title_ids,
                      store.body_ids, batch_size=5)
  half = embed_blocks(DocTower(retriever, *special, block_length=24, compute_dtype="bfloat16"),
                      store.title_ids, store.body_ids, batch_size=5)
  assert half.dtype == np.float32 and half.shape == full.shape
  assert not np.array_equal(half, full)  # it did compute in bfloat16
  assert _cosines(full, half).min() > 0.999
  # Scores move by a few units of bfloat16's precision (2^-8) of their scale (seeds 0-2:
  # at most 0.4, 1.9 and 3.8 units), not more.
  error = np.abs(half @ half.T - full @ full.T)
  scale = np.outer(np.linalg.norm(full, axis=1), np.linalg.norm(full, axis=1))
  assert (error <= 2 ** -5 * scale).all()


@emulation.bf16_compute
def test_bfloat16_export_outputs_float32_close_to_float32(world, tmp_path):
  store, tok, retriever = world
  special = (tok.cls_id, tok.sep_id, tok.pad_id)
  exported = DocEmbedder(export_doc_embedder(retriever, str(tmp_path / "bf16"), *special,
                                             block_length=24, compute_dtype="bfloat16"))
  embeddings = exported.embed_blocks(store.title_ids, store.body_ids)
  assert embeddings.dtype == np.float32
  full = embed_blocks(DocTower(retriever, *special, block_length=24), store.title_ids,
                      store.body_ids)
  assert _cosines(full, embeddings).min() > 0.99


@pytest.mark.parametrize("flags,devices,expected", [
    ({"avx2", "fma"}, ["CPU"], "float32"),  # AVX2 only (e.g. AMD Zen 3): emulated bfloat16
    ({"avx2", "avx512f", "avx512_bf16"}, ["CPU"], "bfloat16"),  # AVX512-BF16 (e.g. Zen 4)
    ({"avx512_bf16", "amx_bf16", "amx_tile"}, ["CPU"], "bfloat16"),  # Intel AMX
    (set(), ["CPU", "TPU"], "bfloat16")])
def test_auto_picks_bfloat16_where_matmuls_have_bfloat16_units(flags, devices, expected):
  assert precision.best_compute_dtype(flags, devices, environ={}, gpus=[]) == expected


@pytest.mark.parametrize("gpus,expected", [
    ([(8, 0)], "bfloat16"),  # A100
    ([(9, 0)], "bfloat16"),  # H100
    ([(8, 6), (8, 9)], "bfloat16"),  # RTX 30xx / L4
    ([(7, 5)], "float32"),  # T4: float16 tensor cores only, bfloat16 emulated
    ([(7, 0)], "float32"),  # V100
    ([(6, 0)], "float32"),  # P100
    ([(9, 0), (7, 5)], "float32"),  # a mixed host computes as its slowest GPU
    ([None], "float32")])  # no compute capability reported
def test_auto_on_gpus_picks_bfloat16_only_with_bfloat16_tensor_cores(gpus, expected):
  """The GPU path by construction (no GPU here): fake device details, whatever the CPU."""
  for flags in (set(), AMX):
    assert precision.best_compute_dtype(flags, ["CPU", "GPU"], environ={}, gpus=gpus) == \
        expected


def test_gpu_capabilities_come_from_tensorflows_device_details(monkeypatch):
  details = {"GPU:0": {"compute_capability": (7, 5)}, "GPU:1": {}}
  monkeypatch.setattr(precision.tf.config, "get_visible_devices",
                      lambda kind: [type("D", (), {"name": n}) for n in details])
  monkeypatch.setattr(precision.tf.config.experimental, "get_device_details",
                      lambda device: details[device.name])
  assert precision.gpu_capabilities() == [(7, 5), None]
  assert precision.best_compute_dtype(set(), ["CPU", "GPU"], environ={}) == "float32"


AMX = {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}


@pytest.mark.parametrize("environ,expected", [
    ({}, "bfloat16"),
    ({"ONEDNN_MAX_CPU_ISA": "ALL"}, "bfloat16"),
    ({"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}, "bfloat16"),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, "bfloat16"),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, "float32"),  # Cascade Lake's kernels
    ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "float32"),  # Zen 3's kernels
    ({"DNNL_MAX_CPU_ISA": "AVX2"}, "float32"),
    ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "float32"),  # Eigen: no bfloat16 units
    ({"TF_ENABLE_ONEDNN_OPTS": "false", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, "float32"),
    ({"TF_ENABLE_ONEDNN_OPTS": "1", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, "bfloat16")])
def test_auto_follows_onednns_isa_limit_and_switch(environ, expected):
  """One machine stands in for the other CPU kinds: oneDNN limited below bfloat16 (or off)
  computes as a machine without bfloat16 units does."""
  assert precision.best_compute_dtype(AMX, ["CPU"], environ=environ, gpus=[]) == expected
  # No limit lends units to a CPU without them.
  assert precision.best_compute_dtype({"avx2"}, ["CPU"], environ=environ, gpus=[]) == "float32"


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 amx_bf16\n\n"
                     "processor\t: 1\nflags\t\t: fpu avx2 amx_bf16\n")
  assert precision.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "amx_bf16"}
  assert precision.cpu_flags(str(tmp_path / "missing")) == set()


@pytest.mark.parametrize("flags,environ,crash", [
    (AMX, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, True),  # the AVX2 stand-in on an AVX-512 CPU
    (AMX, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, False),  # oneDNN emulates bfloat16
    (AMX, {}, False),
    (AMX, {"ONEDNN_MAX_CPU_ISA": "AVX2", "TF_ENABLE_ONEDNN_OPTS": "0"}, False),  # Eigen's
    ({"avx2", "fma"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, False)])  # a real AVX2 CPU: Eigen's
def test_bfloat16_matmuls_crash_only_where_onednn_is_capped_below_avx512(flags, environ, crash):
  assert precision.bf16_matmuls_crash(flags, environ) == crash


def test_explicit_bfloat16_is_refused_where_it_would_crash(monkeypatch):
  """A one-line error naming the remedy instead of a segmentation fault."""
  monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(AMX))
  monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
  monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
  with pytest.raises(ValueError, match="ONEDNN_MAX_CPU_ISA=AVX2 on a CPU with AVX-512 leaves "
                     "oneDNN without bfloat16 kernels.*unset ONEDNN_MAX_CPU_ISA"):
    precision.resolve("bfloat16")
  assert precision.resolve("auto") == "float32"


def test_auto_resolves_to_this_machines_choice():
  assert precision.resolve("auto") == precision.best_compute_dtype()
  assert precision.resolve("float32") == "float32"
  with pytest.raises(ValueError, match="compute_dtype must be one of"):
    precision.resolve("float16")


@emulation.bf16_compute
def test_policy_scope_builds_mixed_bfloat16_towers_and_restores_the_policy():
  with precision.policy_scope("bfloat16") as dtype:
    retriever = configs.build_retriever(configs.RetrieverConfig(
        encoder=configs.EncoderConfig.tiny(vocab_size=len(tiny_world.VOCAB)),
        projection_size=8))
    retriever.build()
  assert dtype == "bfloat16"
  assert keras.mixed_precision.global_policy().name == "float32"
  assert retriever.doc_encoder.compute_dtype == "bfloat16"
  assert all(v.dtype == tf.float32 for v in retriever.trainable_variables)
  # A float32 copy of a bfloat16 tower (e.g. a portable float32 export of it).
  full = with_compute_dtype(retriever, "float32")
  assert full is not retriever and full.doc_encoder.compute_dtype == "float32"
