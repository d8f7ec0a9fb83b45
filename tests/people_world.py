"""A world of many people for the probing tests: `tiny_world`'s table and sentences, with 300
people in place of 16.

Each person's block says where they live and what they do; pre-training examples restate
the facts of the first `pretrained` people only, so the others' facts are in the corpus alone
and a reader fills them only by reading. With 300 people a tiny REALM learns to copy the value
from the block it retrieves before it learns the facts (each pre-training sentence is seen
about 7 times in 200 steps), and it then follows an edited block even for the facts it
pre-trained on. Over `tiny_world`'s 16 people (each sentence seen 150 times in 600 steps, the
`tiny` towers) a reader remembered all 16 facts and followed none of their edits (REALM
Appendix C's caveat).

    python tests/people_world.py /tmp/people   # the world, the trained REALM, moved.jsonl
    python tests/people_world.py /tmp/people --seeds=0,1,2 --name=probe_edit_people_world
        # each seed under /tmp/people/seed<N>, probed; bench/results/<name>.{json,md}
"""
import argparse
import dataclasses
import itertools
import json
import os
import sys
import time
from typing import List

import numpy as np

from realm_tf import presets
from realm_tf import tiny_world
from realm_tf.experiments import registry
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.probing import probe_lib
from realm_tf.tiny_world import Person

# Pseudo-words (consonant, vowel, consonant, vowel): names, cities and jobs no real-world
# knowledge or template word gives away.
_WORDS = tuple("".join(w) for w in itertools.product("bdfgklmnprstvz", "aeiou", "bdfgklmnprstvz",
                                                      "aeiou"))
NUM_VALUES = 16  # cities, and jobs


@dataclasses.dataclass(frozen=True)
class PeopleWorld:
  """A written world: `people[:pretrained]` have pre-training examples."""
  directory: str
  vocab_file: str
  people: List[Person]
  cities: List[str]
  pretrained: int
  vocab_size: int


def write_people_world(directory: str, num_people: int = 300, pretrained: int = 240,
                       seed: int = 0) -> PeopleWorld:
  """Draws the table from `seed` and writes it in `tiny_world.write_pipeline`'s formats, with
  its vocab.txt, into `directory`."""
  rng = np.random.default_rng(seed)
  words = list(_WORDS)
  rng.shuffle(words)
  names = words[:num_people]
  cities = words[num_people:num_people + NUM_VALUES]
  jobs = words[num_people + NUM_VALUES:num_people + 2 * NUM_VALUES]
  people = [Person(name, cities[rng.integers(NUM_VALUES)], jobs[rng.integers(NUM_VALUES)])
            for name in names]
  vocab = tiny_world.SPECIAL_TOKENS + tiny_world.TEMPLATE_WORDS + tuple(names + cities + jobs)
  tiny_world.write_pipeline(directory, people, vocab, pretrained)
  vocab_file = os.path.join(directory, "vocab.txt")
  tiny_world.write_vocab(vocab_file, vocab)
  return PeopleWorld(directory, vocab_file, people, cities, pretrained, len(vocab))


def moved(world: PeopleWorld) -> List[Person]:
  """Every person moved to the next city of `world.cities`."""
  nxt = {city: world.cities[(i + 1) % len(world.cities)] for i, city in enumerate(world.cities)}
  return [dataclasses.replace(p, city=nxt[p.city]) for p in world.people]


def pretrain_realm(world: PeopleWorld, root: str, seed: int = 0) -> str:
  """REALM as the paper trains it, at a tiny size: the ICT warm-start (300 steps) and REALM
  pre-training from it (200 steps, K = 8 with the null document, the index refreshed every 10
  steps), the registered experiments in float32, with the knowledge-world ablations' towers
  (2 layers of 64 units, no dropout; with the 32-unit `tiny` preset and dropout, the reader of
  2 seeds in 4 never learned to copy in 400 steps). Returns the pre-training model directory."""
  encoder = dataclasses.replace(
      presets.encoder_config("tiny", world.vocab_size, dropout_rate=0.0, initializer_range=0.2),
      hidden_size=64, intermediate_size=128)
  model = presets.ModelConfig(encoder=encoder, query_length=16, block_length=24,
                              reader_length=40, projection_size=16)
  runs = {"ict": (dict(num_steps=300, batch_size=32, learning_rate=3e-3), {}),
          "pretrain": (dict(num_steps=200, batch_size=16, learning_rate=1e-3),
                       dict(examples_dir=world.directory, num_candidates=8,
                            exclude_source=False, mlm_warmup_steps=0, refresh="sync",
                            refresh_every=10, index_kind="brute_force",
                            embedding_dtype="float32",
                            retriever_dir=os.path.join(root, "ict", "retriever")))}
  for name, (trainer, task) in runs.items():
    base = registry.get(name)
    run_experiment(dataclasses.replace(
        base, task=dataclasses.replace(base.task, corpus=world.directory, model=model,
                                       vocab_file=world.vocab_file, init=presets.InitConfig(),
                                       **task),
        trainer=dataclasses.replace(base.trainer, model_dir=os.path.join(root, name),
                                    checkpoint_every=trainer["num_steps"], **trainer),
        runtime=dataclasses.replace(base.runtime, seed=seed, compute_dtype="float32")),
        verbose=False)
  return os.path.join(root, "pretrain")


def cloze(person: Person) -> str:
  """The probe of where `person` lives."""
  return f"{person.name} lives in the city of [MASK] ."


def edit_probes(world: PeopleWorld, model_dir: str, corpus: str) -> tuple:
  """Probes where every person of `world` lives, over the run's corpus and over `corpus`
  (every town moved, `moved`), five blocks each: (before, after), `Probe`s in people order."""
  texts = [cloze(p) for p in world.people]
  before = probe_lib.load_prober(model_dir, k=5).probe_many(texts, batch_size=64)
  after = probe_lib.load_prober(model_dir, corpus=corpus, k=5).probe_many(texts, batch_size=64)
  return before, after


def edit_rates(world: PeopleWorld, probes: tuple, people: slice) -> dict:
  """The shares of `world.people[people]`, of `edit_probes`' `probes`, whose fill is their town
  before the edit ("before"), their new town after it ("follows"), their old one after it
  ("keeps"), and whose first block after it is their edited one ("edited_block_first")."""
  old, new = world.people[people], moved(world)[people]
  before, after = (p[people] for p in probes)
  share = lambda hits: float(np.mean(hits))
  first = lambda probe: [z for z in probe.evidence if z.block_id is not None][0]
  return {"before": share([list(b.tokens) == [p.city] for b, p in zip(before, old)]),
          "follows": share([list(a.tokens) == [p.city] for a, p in zip(after, new)]),
          "keeps": share([list(a.tokens) == [p.city] for a, p in zip(after, old)]),
          "edited_block_first": share([first(a).title == p.name
                                       and p.city.title() in first(a).text
                                       for a, p in zip(after, new)])}


def measure(directory: str, seed: int) -> dict:
  """Pre-trains on a world of `seed` in `directory` and probes it before and after the move:
  `edit_rates` of the people not pre-trained on and of those pre-trained on, and seconds."""
  world = write_people_world(os.path.join(directory, "world"), seed=seed)
  wall, cpu = time.perf_counter(), time.process_time()
  model_dir = pretrain_realm(world, directory, seed=seed)
  row = {"seed": seed, "train s": time.perf_counter() - wall,
         "train CPU s": time.process_time() - cpu}
  corpus = tiny_world.write_corpus(os.path.join(directory, "moved.jsonl"), moved(world))
  wall = time.perf_counter()
  probes = edit_probes(world, model_dir, corpus)
  row["probe s"] = time.perf_counter() - wall
  for group, people in (("not pre-trained", slice(world.pretrained, None)),
                        ("pre-trained", slice(0, world.pretrained))):
    row.update({f"{group}: {k}": v for k, v in edit_rates(world, probes, people).items()})
  return row


def write_results(name: str, rows: List[dict]) -> None:
  """bench/results/<name>.{json,md}: `measure`'s rows under the machine line."""
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from bench import bench_utils  # pylint: disable=g-import-not-at-top
  threads = os.environ.get("TF_NUM_INTRAOP_THREADS", "TensorFlow's default")
  markdown = (f"{bench_utils.machine_line()}\n\nIntra-op threads: {threads}; 1-minute load "
              f"average at the end: {os.getloadavg()[0]:.1f}.\n\n"
              + bench_utils.markdown_table(rows, list(rows[0])))
  print(markdown)
  print("wrote", bench_utils.write_results(name, rows, markdown))


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description="Writes the world, pre-trains REALM on it and "
                                   "writes the corpus with everybody moved.")
  parser.add_argument("output_dir")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--seeds", default="", help="With --name: comma-separated seeds, each "
                      "under output_dir/seed<N> (default: --seed).")
  parser.add_argument("--name", default="", help="Also probe every person before and after "
                      "the move, and write bench/results/<name>.{json,md}.")
  args = parser.parse_args(argv)
  if args.name:
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    write_results(args.name, [measure(os.path.join(args.output_dir, f"seed{seed}"), seed)
                              for seed in seeds])
    return
  world = write_people_world(os.path.join(args.output_dir, "world"), seed=args.seed)
  model_dir = pretrain_realm(world, args.output_dir, seed=args.seed)
  corpus = tiny_world.write_corpus(os.path.join(args.output_dir, "moved.jsonl"), moved(world))
  print(json.dumps({"model_dir": model_dir, "moved_corpus": corpus,
                    "not_pretrained": [p.name for p in world.people[world.pretrained:]][:5]}))


if __name__ == "__main__":
  main()
