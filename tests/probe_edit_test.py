"""Knowledge probing follows the corpus (REALM Appendix C's corpus swap): a tiny REALM
pre-trained on `people_world` (the ICT warm-start, then REALM pre-training) is probed with
`realm-probe` over its corpus and over an edited one.

The facts of the world's last 60 people are in no pre-training sentence: the reader can fill
them only by reading the block it retrieves, so what it fills after the edit is what the
edited corpus says. Chance is 1/16 (the cities); on seeds 0-2 every share asserted at >= 0.8
measured 0.967-1.0 and every one asserted at <= 0.1 measured 0.0-0.004 (BENCHMARKS.md §18).
"""
import dataclasses
import json
import os
import subprocess
import sys

import pytest

import people_world
from realm_tf import tiny_world

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  root = tmp_path_factory.mktemp("probe_edit")
  world = people_world.write_people_world(str(root / "world"), seed=0)
  model_dir = people_world.pretrain_realm(world, str(root), seed=0)
  corpus = tiny_world.write_corpus(str(root / "moved.jsonl"), people_world.moved(world))
  return world, model_dir, corpus


@pytest.fixture(scope="module")
def probes(trained):
  """Every person probed over the run's corpus and over the moved one (`edit_probes`)."""
  return people_world.edit_probes(*trained)


def test_probe_follows_an_edited_fact(trained, probes):
  """People of no pre-training sentence, every town moved: before the edit the probe fills
  their town, after it their new one, read from their edited block."""
  world = trained[0]
  rates = people_world.edit_rates(world, probes, slice(world.pretrained, None))
  assert rates["edited_block_first"] >= 0.9, rates
  assert rates["before"] >= 0.8, rates
  assert rates["follows"] >= 0.8, rates
  assert rates["keeps"] <= 0.1, rates


def test_probe_follows_edits_of_the_facts_it_pre_trained_on(trained, probes):
  """People whose facts REALM pre-training masked: the reader reads them too instead of
  remembering them, so the fill follows their edit."""
  world = trained[0]
  rates = people_world.edit_rates(world, probes, slice(0, world.pretrained))
  assert rates["edited_block_first"] >= 0.9, rates
  assert rates["follows"] >= 0.8, rates
  assert rates["keeps"] <= 0.1, rates


def test_realm_probe_binary_reads_one_edited_block(trained, tmp_path):
  """`realm-probe --corpus` with one person's block edited in an otherwise unchanged corpus:
  the fill is the new town, its block first with p(y|z,x) above the null document's."""
  world, model_dir, _ = trained
  person = world.people[-1]
  city = next(c for c in world.cities if c != person.city)
  people = world.people[:-1] + [dataclasses.replace(person, city=city)]
  corpus = tiny_world.write_corpus(str(tmp_path / "one_edit.jsonl"), people)
  result = subprocess.run(
      [sys.executable, "-m", "realm_tf.probe", f"--model_dir={model_dir}", f"--corpus={corpus}",
       "--k=2", "--json", people_world.cloze(person)],
      capture_output=True, text=True, cwd=ROOT, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  record = json.loads(result.stdout)
  null, first = record["evidence"][:2]
  assert record["tokens"] == [city], record
  assert first["title"] == person.name and city.title() in first["text"], record
  assert first["answer_probability"] > null["answer_probability"], record
