"""The user's ScaNN settings: validated, applied, recorded in the manifest, passed on.

Legend: N documents, D embedding dimension.
"""
import dataclasses

import numpy as np
import pytest

from realm_tf import cli
from realm_tf import errors
from realm_tf.mips import index_builder
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_loading import load_index
from realm_tf.mips.manifest import IndexManifest
from realm_tf.mips.scann_index import ScannIndex
from realm_tf.retrieval.async_refresh import AsynchronousRefresher


def _embeddings(num_docs: int, dim: int = 16) -> np.ndarray:
  return np.random.default_rng(0).standard_normal((num_docs, dim)).astype(np.float32)


def test_defaults_are_the_automatic_rule_and_the_reference_setting_is_documented():
  assert ScannSettings() == ScannSettings(0, 0, 2, 100)
  assert ScannSettings().build_args(40_000, 128)["num_leaves"] == 200  # sqrt(N)
  assert ScannSettings().build_args(9_999, 128)["num_leaves"] == 1  # exact below 10k
  assert ScannSettings().build_args(40_000, 128)["num_leaves_to_search"] is None  # L / 20
  assert (index_builder.FULL_WIKIPEDIA.num_leaves,
          index_builder.FULL_WIKIPEDIA.num_leaves_to_search) == (1000, 100)


def test_explicit_settings_are_applied_and_recorded_in_the_manifest(tmp_path):
  settings = ScannSettings(num_leaves=20, num_leaves_to_search=5, dimensions_per_block=4,
                           reorder_k=50)
  embeddings = _embeddings(2_000)
  index = index_builder.build_index(embeddings, "scann", settings)
  assert isinstance(index, ScannIndex)
  index.save(str(tmp_path))
  builder = IndexManifest.read(str(tmp_path)).builder
  assert {k: builder[k] for k in ("num_leaves", "num_leaves_to_search", "dimensions_per_block",
                                  "reorder_k")} == dataclasses.asdict(settings)
  reloaded = load_index(str(tmp_path))
  assert reloaded.builder == index.builder
  queries = embeddings[:4]
  np.testing.assert_array_equal(reloaded.search(queries, 3)[1], index.search(queries, 3)[1])
  assert isinstance(index_builder.build_index(embeddings, "brute_force", settings),
                    BruteForceIndex)


@pytest.mark.parametrize("kwargs,setting", [
    (dict(num_leaves=-1), "ScannSettings.num_leaves"),
    (dict(num_leaves_to_search=-3), "ScannSettings.num_leaves_to_search"),
    (dict(dimensions_per_block=0), "ScannSettings.dimensions_per_block"),
    (dict(reorder_k=0), "ScannSettings.reorder_k"),
    (dict(num_leaves=10, num_leaves_to_search=11), "ScannSettings.num_leaves_to_search"),
    (dict(num_leaves=2.5), "ScannSettings.num_leaves"),
])
def test_bad_settings_are_input_errors_naming_the_setting(kwargs, setting):
  with pytest.raises(errors.InputError, match=f"^{setting}: "):
    ScannSettings(**kwargs)


@pytest.mark.parametrize("kwargs,num_docs,setting", [
    (dict(num_leaves=3_000), 2_500, "ScannSettings.num_leaves"),  # more leaves than documents
    (dict(num_leaves_to_search=111), 12_100, "ScannSettings.num_leaves_to_search"),  # > sqrt(N)
    (dict(num_leaves=20, dimensions_per_block=17), 2_500,
     "ScannSettings.dimensions_per_block"),  # > D
])
def test_settings_that_do_not_fit_the_corpus_are_input_errors(kwargs, num_docs, setting):
  ScannSettings(**kwargs)  # valid on their own
  with pytest.raises(errors.InputError, match=f"^{setting}: "):
    ScannSettings(**kwargs).build_args(num_docs, 16)


def test_unknown_kind_is_an_input_error():
  with pytest.raises(errors.InputError, match="^index_kind: 'faiss'"):
    index_builder.build_index(_embeddings(10), "faiss")


def test_a_binary_names_each_setting_by_its_flag():
  """The library names settings; `cli.run` rewrites them as the flags the binary defines."""
  with pytest.raises(errors.InputError) as raised:
    ScannSettings(num_leaves=10, num_leaves_to_search=11)
  message = str(raised.value)
  assert message.startswith("ScannSettings.num_leaves_to_search: 11 leaves to search, but "
                            "ScannSettings.num_leaves=10.")
  flags = set(cli.INDEX_SETTING_FLAGS.values())
  assert cli.in_flag_names(message, flags).startswith(
      "--scann_num_leaves_to_search: 11 leaves to search, but --scann_num_leaves=10.")
  assert cli.in_flag_names(message, set()) == message  # a binary without those flags
  with pytest.raises(errors.InputError) as raised:
    index_builder.Sharding(shard_size=-1)
  assert cli.in_flag_names(str(raised.value), flags).startswith(
      "--index_shard_size: -1 is not an integer >= 0.")
  builder_param = "manifest.json: builder parameter 'shard_size' missing"
  assert cli.in_flag_names(builder_param, flags) == builder_param


def test_the_flags_are_the_settings_and_reach_the_asynchronous_builder():
  fields = [f"ScannSettings.{f.name}" for f in dataclasses.fields(ScannSettings)] + [
      f"Sharding.{f.name}" for f in dataclasses.fields(index_builder.Sharding)]
  assert list(cli.INDEX_SETTING_FLAGS) == fields
  assert [s.split(".")[1] for s in fields] == list(cli.IndexFlags._fields)
  assert set(cli.INDEX_KINDS) == set(index_builder.KINDS)
  settings = ScannSettings(num_leaves=1000, num_leaves_to_search=100, reorder_k=200)
  sharding = index_builder.Sharding()
  assert cli.index_flag_args(settings, sharding) == [
      "--scann_num_leaves=1000", "--scann_num_leaves_to_search=100",
      "--scann_dimensions_per_block=2", "--scann_reorder_k=200", "--index_shard_size=0"]

  class Store:  # the refresher only keeps the corpus until it builds
    fingerprint = "f"

  refresher = AsynchronousRefresher("/tmp/root", 10, Store(), (2, 3, 0), "/tmp/corpus",
                                    "/tmp/snapshots", builder_args=["--runner=DirectRunner"],
                                    scann=settings)
  command = refresher.builder_command("/tmp/snapshots/step-00000010")
  assert command[-6:] == cli.index_flag_args(settings, sharding) + ["--runner=DirectRunner"]
