"""A chain's stages (`realm_tf.experiments.chain`): the schedule, the order its settings apply
in, and the keys that name earlier runs (the real-data chain's run directories, the ablations'
and the demo's settings files), pinned to their values before the three chains shared it.
Nothing is trained."""
import hashlib
import json

import pytest

from realm_tf import errors
from realm_tf.demo.config import DemoConfig
from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.experiments.chain import Stage
from realm_tf.experiments.chain import stage_experiment
from realm_tf.knowledge_world import ablation_config
from realm_tf.knowledge_world import ablation_result
from realm_tf.presets import InitConfig
from realm_tf.presets import ModelConfig
from realm_tf.real_data import chain
from realm_tf.real_data.chain import ChainConfig


def _sha(settings) -> str:
  return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def test_a_stage_reads_its_schedule_from_a_chains_settings():
  assert Stage.of(DemoConfig(), "finetune") == Stage(48, 4, 5e-5)
  assert Stage.of(ChainConfig(), "pretrain") == Stage(100, 4, 1e-5)
  assert Stage.of(ablation_config.AblationConfig("x"), "ict", checkpoint_every=300) == Stage(
      300, 32, 3e-3, 300)
  assert Stage(5, 2, 0.1).settings() == {
      "trainer.num_steps": 5, "trainer.batch_size": 2, "trainer.learning_rate": 0.1,
      "trainer.checkpoint_every": 2}  # half-way and at the end
  assert Stage(1, 2, 0.1).settings()["trainer.checkpoint_every"] == 1
  assert Stage(5, 2, 0.1, checkpoint_every=5).settings()["trainer.checkpoint_every"] == 5


def test_shared_then_the_schedule_then_the_stages_own_settings():
  model = ModelConfig(retriever_head="sentence", query_length=24, block_length=40)
  shared = {"task.model": model, "task.vocab_file": "v.txt", "runtime.seed": 3,
            "trainer.learning_rate": 9.0, "trainer.keep_checkpoints": 1}
  config = stage_experiment("open_qa", "/runs/qa", Stage(10, 2, 1e-3), shared, {
      "task.model.block_length": 48, "trainer.keep_checkpoints": 2,
      "task.init": InitConfig(checkpoint="/runs/realm")})
  registered = registry.get("open_qa")
  assert (config.trainer.model_dir, config.trainer.num_steps, config.trainer.batch_size,
          config.trainer.learning_rate, config.trainer.checkpoint_every) == (
              "/runs/qa", 10, 2, 1e-3, 5)  # the schedule over the shared rate
  assert config.trainer.keep_checkpoints == 2  # the stage's own over the shared
  assert config.task.model == ModelConfig(retriever_head="sentence", query_length=24,
                                          block_length=48)  # a whole config, then a field
  assert config.task.init == InitConfig(checkpoint="/runs/realm")
  assert (config.task.vocab_file, config.runtime.seed) == ("v.txt", 3)
  assert config.task.reader_top_k == registered.task.reader_top_k
  assert config.trainer.warmup_steps == registered.trainer.warmup_steps


def test_a_group_takes_a_config_of_its_own_type_only():
  with pytest.raises(errors.InputError, match="task.model: is a group of settings"):
    overrides.override(registry.get("ict"), {"task.model": InitConfig()})
  with pytest.raises(errors.InputError, match="task.bogus"):
    stage_experiment("ict", "/runs/ict", Stage(1, 1, 0.1), {"task.bogus": 1})


def test_the_ablation_variants_fine_tuning_settings_are_open_qa_settings():
  for variant, settings in ablation_config.FINETUNE_SETTINGS.items():
    config = overrides.override(registry.get("open_qa"), settings)
    assert config != registry.get("open_qa"), variant


def test_the_keys_of_earlier_runs_are_unchanged(monkeypatch):
  # The digest holds the resolved precision; bfloat16 resolves only where oneDNN has its
  # kernels, so the pinned keys are computed with the dtypes as written.
  monkeypatch.setattr(chain.precision, "resolve", lambda dtype: dtype)
  for dtype, digest in (("float32", "a9438387"), ("bfloat16", "4d6099ea")):
    assert ChainConfig(compute_dtype=dtype).digest() == digest  # run directory names
    assert ChainConfig(compute_dtype=dtype, mlm_loss="sequence").digest() == digest
  assert ChainConfig(ict_steps=7, pretrain_learning_rate=2e-5,
                     compute_dtype="float32").digest() == "35bb4246"
  # full_config's default variants gained realm_spanbert: its earlier seeds re-run with it.
  for preset, sha in (("small_config", "157aafb7a945"), ("full_config", "1cfe565c6e05")):
    settings = ablation_result._settings(getattr(ablation_config, preset)("/r").for_seed(0))
    assert _sha(settings) == sha, preset  # a seed's result.json is reused by these
  assert _sha(DemoConfig().settings()) == "d3b5def8e803"  # a demo run's config.json
