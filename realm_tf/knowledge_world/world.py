"""A synthetic knowledge world: people with facts, told in three different voices.

`generate_world(WorldConfig)` draws everything from one seeded generator, so a (config, seed)
gives the same world byte for byte: people (pseudo-word names, so that no fact comes from
real-world knowledge; a birth date, birthplace, residence, occupation and a mentor, whose name
then appears in other people's documents, all drawn independently of the name), the knowledge
corpus Z (`docs_per_entity` Wikipedia-style documents per person, the facts spread over them),
the pre-training corpus X (the salient facts restated with other templates, X != Z, each with
its salient span and label) and one question per (person, salient fact: birth_date DATE,
birth_place and residence GPE, mentor PERSON), its answer a span of Z not in the question.

X and Z share the relation words right before a value ("born in"), as two texts restating one
fact usually do: that lets a 2-layer reader learn to copy the value from a retrieved block
within a few hundred steps.
"""
import dataclasses
import re
from typing import Dict, List, Sequence, Tuple

import numpy as np

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
OCCUPATIONS = ("baker", "pilot", "nurse", "judge", "miner", "tailor", "coach", "chef",
               "painter", "farmer", "sailor", "weaver", "potter", "mason", "banker", "doctor",
               "lawyer", "poet", "singer", "dancer", "builder", "carpenter", "fisher", "glazier")
SALIENT_FACTS = ("birth_date", "birth_place", "residence", "mentor")
FACT_LABELS = {"birth_date": "DATE", "birth_place": "GPE", "residence": "GPE",
               "mentor": "PERSON"}

# Knowledge corpus Z: {s} is the subject's name, {v} the value. Z and X state a fact with the
# same relation words right before the value ("born on", "born in", "lives in", "taught by"),
# inside different sentences, as a news sentence and an encyclopedia sentence restating one
# fact usually do; which sentence frame surrounds them differs.
Z_TEMPLATES = {
    "occupation": ("{s} is a {v}.", "{s} works as a {v}.", "{s} is known as a {v}."),
    "birth_date": ("{s} was born on {v}.", "According to the records, {s} was born on {v}.",
                   "The family of {s} says that {s} was born on {v}."),
    "birth_place": ("{s} was born in {v}.", "According to the records, {s} was born in {v}.",
                    "The family of {s} says that {s} was born in {v}."),
    "residence": ("{s} lives in {v}.", "Today {s} lives in {v}.",
                  "The family of {s} says that {s} lives in {v}."),
    "mentor": ("{s} was taught by {v}.", "As a student, {s} was taught by {v}.",
               "The family of {s} says that {s} was taught by {v}."),
}
# Pre-training corpus X: other sentences restating the salient facts ({o}: the occupation).
X_TEMPLATES = {
    "birth_date": ("the {o} {s} , born on {v} , is still working .",
                   "friends of {s} know that the {o} was born on {v} .",
                   "a new biography of {s} tells that the {o} was born on {v} .",
                   "it is said that {s} , a {o} , was born on {v} ."),
    "birth_place": ("the {o} {s} , born in {v} , is still working .",
                    "friends of {s} know that the {o} was born in {v} .",
                    "a new biography of {s} tells that the {o} was born in {v} .",
                    "it is said that {s} , a {o} , was born in {v} ."),
    "residence": ("the {o} {s} , who lives in {v} , is still working .",
                  "friends of {s} know that the {o} lives in {v} .",
                  "a new biography of {s} tells that the {o} lives in {v} .",
                  "it is said that {s} , a {o} , lives in {v} ."),
    "mentor": ("the {o} {s} , who was taught by {v} , is still working .",
               "friends of {s} know that the {o} was taught by {v} .",
               "a new biography of {s} tells that the {o} was taught by {v} .",
               "it is said that {s} , a {o} , was taught by {v} ."),
}
QUESTION_TEMPLATES = {
    "birth_date": ("when was {s} born?", "what is the date of birth of {s}?"),
    "birth_place": ("where was {s} born?", "in which town was {s} born?"),
    "residence": ("where does {s} live?", "in which town does {s} live?"),
    "mentor": ("who taught {s}?", "who was the teacher of {s}?"),
}
_ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br",
           "dr", "gr", "kr", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
_CODAS = ("n", "r", "l", "s", "m", "th", "nd", "rk")


@dataclasses.dataclass(frozen=True)
class WorldConfig:
  """How big the world is.

  Attributes:
    num_entities: people (>= 4).
    docs_per_entity: Z documents per person (1..4); the salient facts are spread over them.
    num_places: towns (0: as many as people).
    x_sentences_per_fact: X sentences per (person, salient fact), each with its own template
      (1..4).
    dev_fraction, test_fraction: of the questions (the rest is train).
    x_occupation: X sentences name the person's occupation ("the baker Brak Tholand, born
      in ..."), a cue Z shares and questions lack; False says "the person" instead.
    seed: everything is drawn from it.
  """
  num_entities: int = 120
  docs_per_entity: int = 2
  num_places: int = 0
  x_sentences_per_fact: int = 2
  dev_fraction: float = 0.1
  test_fraction: float = 0.2
  x_occupation: bool = True
  seed: int = 0

  def __post_init__(self):
    if self.num_entities < 4:
      raise ValueError(f"num_entities must be >= 4, got {self.num_entities}")
    if not 1 <= self.docs_per_entity <= len(SALIENT_FACTS):
      raise ValueError(f"docs_per_entity must be in 1..{len(SALIENT_FACTS)}, got "
                       f"{self.docs_per_entity}")
    if not 1 <= self.x_sentences_per_fact <= 4:
      raise ValueError(f"x_sentences_per_fact must be in 1..4, got {self.x_sentences_per_fact}")
    if self.num_places < 0:
      raise ValueError(f"num_places must be >= 0, got {self.num_places}")
    if not (0 <= self.dev_fraction and 0 < self.test_fraction and
            self.dev_fraction + self.test_fraction < 1):
      raise ValueError("need 0 <= dev_fraction, 0 < test_fraction and their sum < 1")


@dataclasses.dataclass(frozen=True)
class Entity:
  """A person: `facts` maps occupation and the salient facts to their surface text."""
  name: str
  surname: str
  facts: Dict[str, str]


@dataclasses.dataclass(frozen=True)
class Document:
  """A Z document about `entity` (index into the world's entities)."""
  entity: int
  title: str
  text: str
  facts: Tuple[str, ...]  # the salient facts it states


@dataclasses.dataclass(frozen=True)
class Sentence:
  """An X sentence with its salient span (character offsets into `text`)."""
  entity: int
  fact: str
  text: str
  span_start: int
  span_end: int  # exclusive
  label: str
  document: int  # the Z document stating the fact (its block is excluded from retrieval)

  @property
  def span_text(self) -> str:
    return self.text[self.span_start:self.span_end]


@dataclasses.dataclass(frozen=True)
class Question:
  entity: int
  fact: str
  question: str
  answers: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class World:
  config: WorldConfig
  entities: List[Entity]
  documents: List[Document]
  sentences: List[Sentence]
  questions: Dict[str, List[Question]]  # "train", "dev", "test"


def words(text: str) -> List[str]:
  """Lower-cased words and punctuation marks, split as BERT's basic tokenizer splits them."""
  return re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text.lower())


def template_words() -> set:
  texts = [MONTHS, OCCUPATIONS]
  texts += [t for group in (Z_TEMPLATES, X_TEMPLATES, QUESTION_TEMPLATES)
            for templates in group.values() for t in templates]
  return {w for group in texts for t in group for w in words(t)}


def _pseudo_words(rng: np.random.Generator, count: int, syllables: int, taken: set) -> List[str]:
  """`count` distinct pronounceable pseudo-words not in `taken` (which they are added to)."""
  found = []
  while len(found) < count:
    word = "".join(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))]
                   for _ in range(syllables)) + _CODAS[rng.integers(len(_CODAS))]
    if word not in taken and len(word) >= 4:
      taken.add(word)
      found.append(word)
  return found


def _entities(config: WorldConfig, rng: np.random.Generator) -> List[Entity]:
  n = config.num_entities
  taken = template_words()
  first_names = _pseudo_words(rng, max(4, int(np.ceil(np.sqrt(n)))), 1, taken)
  surnames = _pseudo_words(rng, n, 2, taken)  # unique: a surname names one person
  towns = _pseudo_words(rng, config.num_places or n, 2, taken)
  names = [(first_names[rng.integers(len(first_names))].title(), last.title())
           for last in surnames]
  mentors = (np.arange(n) + rng.integers(1, n, size=n)) % n  # never oneself
  entities = []
  for i, (first, last) in enumerate(names):
    date = f"{rng.integers(1, 29)} {MONTHS[rng.integers(12)]} {rng.integers(1700, 2000)}"
    facts = {"occupation": OCCUPATIONS[rng.integers(len(OCCUPATIONS))],
             "birth_date": date,
             "birth_place": towns[rng.integers(len(towns))].title(),
             "residence": towns[rng.integers(len(towns))].title(),
             "mentor": " ".join(names[mentors[i]])}
    entities.append(Entity(f"{first} {last}", last, facts))
  return entities


def _documents(config: WorldConfig, entities: Sequence[Entity],
               rng: np.random.Generator) -> List[Document]:
  sections = ("life", "career", "family", "legacy")
  documents = []
  for e, entity in enumerate(entities):
    facts = list(rng.permutation(SALIENT_FACTS))
    groups = [facts[d::config.docs_per_entity] for d in range(config.docs_per_entity)]
    for d, group in enumerate(groups):
      title = entity.name if config.docs_per_entity == 1 else f"{entity.name}: {sections[d]}"
      subjects = [entity.name] + [entity.surname] * len(group)
      statements = [("occupation", entity.facts["occupation"])] + [
          (f, entity.facts[f]) for f in group]
      text = " ".join(
          _capitalise(Z_TEMPLATES[f][rng.integers(len(Z_TEMPLATES[f]))].format(s=s, v=v))
          for (f, v), s in zip(statements, subjects))
      documents.append(Document(e, title, text, tuple(group)))
  return documents


def _capitalise(sentence: str) -> str:
  return sentence[0].upper() + sentence[1:]


def _sentences(config: WorldConfig, entities: Sequence[Entity], documents: Sequence[Document],
               rng: np.random.Generator) -> List[Sentence]:
  where = {(d.entity, f): i for i, d in enumerate(documents) for f in d.facts}
  sentences = []
  for e, entity in enumerate(entities):
    for fact in SALIENT_FACTS:
      templates = X_TEMPLATES[fact]
      for t in rng.permutation(len(templates))[:config.x_sentences_per_fact]:
        template = templates[t]
        value = entity.facts[fact]
        before, after = template.split("{v}")
        fill = dict(s=entity.name,
                    o=entity.facts["occupation"] if config.x_occupation else "person")
        before, after = before.format(**fill), after.format(**fill)
        text = before + value + after
        sentences.append(Sentence(e, fact, text, len(before), len(before) + len(value),
                                  FACT_LABELS[fact], where[(e, fact)]))
  order = rng.permutation(len(sentences))
  return [sentences[i] for i in order]


def _questions(config: WorldConfig, entities: Sequence[Entity],
               rng: np.random.Generator) -> Dict[str, List[Question]]:
  questions = []
  for e, entity in enumerate(entities):
    for fact in SALIENT_FACTS:
      templates = QUESTION_TEMPLATES[fact]
      text = templates[rng.integers(len(templates))].format(s=entity.name.lower())
      questions.append(Question(e, fact, text, (entity.facts[fact],)))
  order = rng.permutation(len(questions))
  num_test = max(1, int(round(config.test_fraction * len(questions))))
  num_dev = int(round(config.dev_fraction * len(questions)))
  split = {"test": order[:num_test], "dev": order[num_test:num_test + num_dev],
           "train": order[num_test + num_dev:]}
  return {name: [questions[i] for i in sorted(rows)] for name, rows in split.items()}


def generate_world(config: WorldConfig = WorldConfig()) -> World:
  """The world of `config` (deterministic in `config.seed`)."""
  rng = np.random.default_rng(config.seed)
  entities = _entities(config, rng)
  documents = _documents(config, entities, rng)
  sentences = _sentences(config, entities, documents, rng)
  questions = _questions(config, entities, rng)
  return World(config, entities, documents, sentences, questions)


def vocabulary(world: World, special_tokens: Sequence[str]) -> List[str]:
  """`special_tokens`, then every lower-cased whole word and punctuation mark of the world
  (Z, X, questions, answers), sorted: each word is one wordpiece."""
  texts = [d.title for d in world.documents] + [d.text for d in world.documents]
  texts += [s.text for s in world.sentences]
  texts += [q.question for qs in world.questions.values() for q in qs]
  texts += [a for qs in world.questions.values() for q in qs for a in q.answers]
  found = {w for text in texts for w in words(text)}
  return list(special_tokens) + sorted(found - set(special_tokens))
