"""Knowledge probing of a REALM pre-training model (REALM Tables 3-4, Appendix D): a cloze
text's `[MASK]`s filled by retrieve-then-read, with what each retrieved block contributed.

    probe = load_prober("runs/realm").probe("Ada lives in [MASK] .")
    probe.tokens, probe.probability, probe.evidence[1].retrieval_utility

As in pre-training, the masked query x retrieves the top k blocks, the null document ∅ goes
first (K = k + 1 candidates), p(z|x) is the softmax of the towers' scores over the K and the
reader reads every (x, z). Each `[MASK]` y_j is the argmax of Σ_z p(z|x) p(y_j|z,x), p(y|x)
is marginalised in the run's `mlm_loss` form, and per candidate p(y|z,x) = Π_j p(y_j|z,x) and
RU(z|x) = log p(y|z,x) - log p(y|∅,x). `corpus=` swaps the knowledge corpus (Appendix C).

The index only chooses the k blocks and the doc tower scores them, as pre-training re-embeds
its candidates: the published index can be up to a refresh interval older than the towers.
"""
import dataclasses
import json
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf import graph_functions
from realm_tf import pretrained
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.experiments import registry
from realm_tf.experiment_config import EXPERIMENT_FILE
from realm_tf.losses.mlm_marginal_likelihood import MLM_LOSS_FORMS
from realm_tf.losses.mlm_marginal_likelihood import marginal_token_log_probs
from realm_tf.losses.mlm_marginal_likelihood import masked_token_log_probs
from realm_tf.losses.mlm_marginal_likelihood import sequence_marginal_log_probs
from realm_tf.losses.retrieval_utility import document_retrieval_utility
from realm_tf.mips import index_publisher
from realm_tf.mips.index_builder import build_index
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.models import precision
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.models.saving import load_model
from realm_tf.retrieval.block_fit import check_blocks_fit
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.tokenization import doc_input as doc_inputs
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import run_config
from realm_tf.training.candidates import CandidateBuilder

MASK = "[MASK]"


@dataclasses.dataclass(frozen=True)
class Evidence:
  """One candidate z: the null document (`block_id` None, empty title and text) or a block."""
  block_id: Optional[int]
  title: str
  text: str
  probability: float  # p(z|x) among the K candidates
  answer_probability: float  # p(y|z,x) of the filled answer y
  retrieval_utility: float  # RU(z|x) = log p(y|z,x) - log p(y|∅,x); 0 for ∅


@dataclasses.dataclass(frozen=True)
class Probe:
  """A filled cloze text (module docstring)."""
  text: str
  tokens: Tuple[str, ...]  # y_j, one per [MASK]
  token_probabilities: Tuple[float, ...]  # p(y_j|x)
  probability: float  # p(y|x), in the run's form
  no_retrieval_probability: float  # p(y|∅,x)
  no_retrieval_tokens: Tuple[str, ...]  # what the reader given only ∅ fills: its argmax per mask
  no_retrieval_tokens_probability: float  # their p(·|∅,x)
  evidence: Tuple[Evidence, ...]  # ∅ first, then the retrieved blocks by rank

  @property
  def filled(self) -> str:
    """The text with each [MASK] replaced by its token."""
    parts = self.text.split(MASK)
    return parts[0] + "".join(t + p for t, p in zip(self.tokens, parts[1:]))

  def to_json(self) -> dict:
    return dict(dataclasses.asdict(self), filled=self.filled)


def check_text(text: str, number: int = 1) -> str:
  """`text` if it holds a [MASK]; else an `InputError` naming it (`number`: its position)."""
  if MASK not in text:
    raise errors.InputError(errors.describe(
        f"text {number} {text!r}", f"has no {MASK}",
        f"Write {MASK} for each wordpiece to fill, e.g. 'Ada lives in {MASK} .'"))
  return text


class Prober:
  """Fills cloze texts with a retriever and a reader over a corpus (module docstring).

  Args:
    retriever, reader: the REALM towers (the reader with its MLM head).
    tokenizer: their vocabulary.
    corpus: the knowledge corpus.
    index: a MIPS index of `corpus` (row r = corpus row r); None: the doc tower embeds
      `corpus` into an exact index in memory.
    query_length, block_length: pre-training's Lq and Lb (the reader reads Lq + Lb).
    k: blocks retrieved per text.
    mlm_loss: the form p(y|x) is marginalised in, the run's `task.mlm_loss` ("token" or
      "sequence").
  """

  def __init__(self, retriever: Retriever, reader: Reader, tokenizer: WordpieceTokenizer,
               corpus: Corpus, index: Optional[MipsIndex] = None, query_length: int = 96,
               block_length: int = BLOCK_LENGTH, k: int = 5, mlm_loss: str = "token"):
    self.retriever, self.reader, self.tokenizer, self.corpus = (retriever, reader, tokenizer,
                                                                corpus)
    if mlm_loss not in MLM_LOSS_FORMS:
      raise ValueError(f"mlm_loss must be one of {MLM_LOSS_FORMS}, got {mlm_loss!r}")
    self.mlm_loss = mlm_loss
    if k > len(corpus):
      raise errors.InputError(errors.describe(
          f"--k={k}", f"more blocks than the corpus {corpus.source!r} has ({len(corpus)})",
          f"Pass --k={len(corpus)} or less"))
    self.featurizer = Featurizer(tokenizer, query_length, block_length,
                                 doc_input=retriever.doc_input)
    self.candidates = CandidateBuilder(corpus, self.featurizer, k + 1, null_document=True,
                                       exclude_source=False)
    if index is None:
      tower = DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                       block_length)
      index = build_index(embed_blocks(tower, *corpus.wordpieces(tokenizer)), "brute_force")
    self.index = index

  def query_ids(self, text: str, number: int = 1) -> Tuple[List[int], List[int]]:
    """(x's wordpieces with [MASK] ids, the masks' positions in them) of a checked `text`
    (`number`: its position, for errors).

    Raises:
      InputError: no [MASK], or more wordpieces than the model's queries hold.
    """
    segments = self.tokenizer(tf.constant(check_text(text, number).split(MASK))).to_list()
    ids = list(segments[0])
    for segment in segments[1:]:
      ids += [self.tokenizer.mask_id] + segment
    room = self.featurizer.query_length - 2
    if len(ids) > room:
      raise errors.InputError(errors.describe(
          f"text {number} {text!r}", f"{len(ids)} wordpieces, the model's queries hold {room}",
          "Shorten it"))
    return ids, [i for i, t in enumerate(ids) if t == self.tokenizer.mask_id]

  def probe(self, text: str) -> Probe:
    """Fills the [MASK]s of `text` (`probe_many`)."""
    return self.probe_many([text])[0]

  def probe_many(self, texts: Sequence[str], batch_size: int = 16) -> List[Probe]:
    """Fills the [MASK]s of `texts`, `batch_size` (B) at a time.

    Raises:
      InputError: a text without [MASK], or with more wordpieces than the queries hold.
    """
    queries = [self.query_ids(text, number) for number, text in enumerate(texts, start=1)]
    probes = []
    for start in range(0, len(texts), batch_size):
      batch = queries[start:start + batch_size]
      query_ids = tf.ragged.constant([ids for ids, _ in batch], tf.int32)
      query = self._embed_query(self.featurizer.pack_queries(query_ids))  # [B, D]
      retrieved = self.index.search(query, self.candidates.num_to_retrieve)[1].numpy()
      selection = self.candidates.select(retrieved, np.full([len(batch)], -1))
      docs, reader = self.candidates.features(selection.rows, query_ids)
      width = max(len(masks) for _, masks in batch)  # shorter rows read [CLS], weighted 0
      positions = [[m + 1 for m in masks] + [0] * (width - len(masks)) for _, masks in batch]
      weights = [[1.0] * len(masks) + [0.0] * (width - len(masks)) for _, masks in batch]
      outputs = {n: t.numpy() for n, t in self._read(
          query, docs, reader, tf.constant(positions, tf.int32), tf.constant(weights),
          tf.constant(selection.mask)).items()}
      for b, (_, masks) in enumerate(batch):
        probes.append(self._result(texts[start + b], {n: v[b] for n, v in outputs.items()},
                                   selection.rows[b][selection.mask[b]], len(masks)))
    return probes

  @graph_functions.function(reduce_retracing=True)
  def _embed_query(self, features):
    return tf.cast(self.retriever.embed_query(features, training=False), tf.float32)

  @graph_functions.function(reduce_retracing=True)
  def _read(self, query, docs, reader, positions, weights, mask):
    """query [B, D], docs {name: [B, K, Lb]}, reader {name: [B, K, Lr]}, positions [B, M],
    weights [B, M] (0: padding), mask bool [B, K] -> {name: [B, ...]} (see `_result`)."""
    scores = Retriever.score(tf.cast(query, tf.float32), tf.cast(
        self.retriever.embed_candidates(docs, training=False), tf.float32))
    scores = tf.where(mask, scores, -1e9)  # [B, K]
    shape = tf.shape(reader["input_word_ids"])
    b, k, m = shape[0], shape[1], tf.shape(positions)[1]
    flat = {n: tf.reshape(t, [b * k, -1]) for n, t in reader.items()}
    mlm = self.reader.mlm_logits(flat, tf.repeat(positions, k, axis=0), training=False)
    log_probs = tf.nn.log_softmax(tf.reshape(tf.cast(mlm, tf.float32), [b, k, m, -1]))
    # p(v|x) for every v: the per-token marginal with the vocabulary folded into M.
    vocab = tf.shape(log_probs)[-1]
    every = tf.reshape(marginal_token_log_probs(
        scores, tf.reshape(log_probs, [b, k, m * vocab])), [b, m, vocab])  # [B, M, V]
    predicted = tf.argmax(every, axis=-1, output_type=tf.int32)  # [B, M]
    token_log_probs = masked_token_log_probs(log_probs, predicted)  # [B, K, M]
    marginal = tf.gather(every, predicted, batch_dims=2)  # [B, M]
    alone = tf.argmax(log_probs[:, 0], axis=-1, output_type=tf.int32)  # [B, M]
    return {"candidate_log_probs": tf.nn.log_softmax(scores),  # [B, K]
            "predicted": predicted, "marginal": marginal, "token_log_probs": token_log_probs,
            "log_probability": (  # [B]
                tf.reduce_sum(marginal * weights, axis=-1) if self.mlm_loss == "token" else
                sequence_marginal_log_probs(scores, token_log_probs, weights)),
            "retrieval_utility": document_retrieval_utility(token_log_probs, weights),  # [B, K]
            "alone": alone, "alone_log_probs": tf.gather(log_probs[:, 0], alone, batch_dims=2)}

  def _result(self, text: str, out, rows: np.ndarray, num_masks: int) -> Probe:
    """The `Probe` of one text's `_read` outputs, given its K' <= K unmasked candidates'
    `rows` and its number of masks."""
    out = dict(out, **{n: out[n][..., :num_masks] for n in (
        "predicted", "marginal", "token_log_probs", "alone", "alone_log_probs")})
    answer = out["token_log_probs"].astype(np.float64).sum(axis=-1)  # log p(y|z,x) [K]
    evidence = []
    for i, row in enumerate(rows):
      null = row == self.candidates.null_row
      evidence.append(Evidence(
          None if null else int(self.corpus.block_ids[row]),
          "" if null else self.corpus.titles[row], "" if null else self.corpus.texts[row],
          float(np.exp(out["candidate_log_probs"][i])), float(np.exp(answer[i])),
          float(out["retrieval_utility"][i])))
    tokens = lambda ids: tuple(self.tokenizer.id_to_token(int(t)) for t in ids)
    return Probe(text, tokens(out["predicted"]),
                 tuple(float(p) for p in np.exp(out["marginal"].astype(np.float64))),
                 float(np.exp(np.float64(out["log_probability"]))),
                 float(np.exp(answer[0])), tokens(out["alone"]),
                 float(np.exp(out["alone_log_probs"].astype(np.float64).sum())), tuple(evidence))


def _missing(model_dir: str, what: str) -> errors.InputError:
  return errors.InputError(errors.describe(
      model_dir, f"no {what}: not the model directory of a finished REALM pre-training run",
      "Pass the --model_dir of realm-pretrain (or realm-train --experiment=pretrain), which "
      "writes retriever/, reader/, index/ and experiment.json when it ends"))


def _check_vocabulary(model_dir: str, reader: Reader, tokenizer: WordpieceTokenizer,
                      vocab_file: str) -> None:
  """`vocab_file` fits the reader's embedding table and is the one the run recorded."""
  rows = int(reader.encoder.get_embedding_table().shape[0])
  path = os.path.join(model_dir, "checkpoints", run_config.RUN_CONFIG)
  recorded = ""
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      recorded = json.load(f).get("vocab_fingerprint", "")
  if rows != tokenizer.vocab_size:
    problem = f"{tokenizer.vocab_size} wordpieces for a reader of {rows}"
  elif recorded and recorded != run_config.vocab_fingerprint(tokenizer.vocabulary):
    problem = f"not the vocabulary {path} records"
  else:
    return
  raise errors.InputError(errors.describe(
      vocab_file, f"{problem} (model {model_dir})", "Pass the run's --vocab_file"))


def _published_index(model_dir: str, corpus: Corpus, doc_input: str) -> MipsIndex:
  """The run's latest published index, checked to index `corpus` in the form `doc_input`."""
  root = os.path.join(model_dir, "index")
  version = index_publisher.latest_version(root) if tf.io.gfile.isdir(root) else None
  if version is None:
    raise _missing(model_dir, "published index in index/")
  index = index_publisher.load_version(root, version)
  metadata = index_publisher.read_metadata(root, version)
  doc_inputs.check_index(doc_inputs.of_metadata(metadata), doc_input, os.path.join(root, version))
  built_from = metadata.get("corpus_fingerprint")
  if index.num_docs != len(corpus) or built_from not in (None, corpus.fingerprint):
    raise errors.InputError(errors.describe(
        os.path.join(root, version), f"indexes another corpus ({index.num_docs} blocks) than "
        f"{corpus.source!r} ({len(corpus)} blocks)", "Pass --corpus to embed that one"))
  return index


def load_prober(model_dir: str, corpus: str = "", vocab_file: str = "", k: int = 5,
                compute_dtype: str = "float32") -> Prober:
  """The `Prober` of a pre-training model directory: `retriever/`, `reader/` (`save_model`),
  `experiment.json` (corpus, vocabulary, lengths) and, without `corpus`, the latest index of
  `index/`.

  Args:
    model_dir: the directory `realm-pretrain` wrote.
    corpus: another knowledge corpus (any `Corpus.load` input), embedded by the doc tower;
      default the run's `task.corpus`, searched through its published index.
    vocab_file: default the run's `task.vocab_file` (empty: MiniLM's).
    k: blocks retrieved per text.
    compute_dtype: the towers' precision ("float32", "bfloat16", "auto";
      `models.precision.with_compute_dtype`).

  Raises:
    InputError: a directory without those files, a reader without an MLM head, a vocabulary
      or an index that is not the model's.
  """
  towers = {}
  for name, kind in (("retriever", Retriever), ("reader", Reader)):
    path = os.path.join(model_dir, name)
    if not tf.io.gfile.isdir(path):
      raise _missing(model_dir, f"{name}/")
    towers[name] = load_model(path)
    if not isinstance(towers[name], kind):
      raise errors.InputError(errors.describe(
          path, f"holds a {type(towers[name]).__name__}, not a REALM {name}"
          f"{' with an MLM head' if kind is Reader else ''}",
          f"Pass the --model_dir of a REALM pre-training run, whose {name}/ is one"))
  experiment = os.path.join(model_dir, EXPERIMENT_FILE)
  if not tf.io.gfile.exists(experiment):
    raise _missing(model_dir, EXPERIMENT_FILE)
  task = registry.build("pretrain", experiment).task
  vocab_file = vocab_file or task.vocab_file or os.path.join(pretrained.minilm_dir(),
                                                             "vocab.txt")
  tokenizer = WordpieceTokenizer.from_vocab_file(vocab_file)
  _check_vocabulary(model_dir, towers["reader"], tokenizer, vocab_file)
  store = Corpus.load(corpus or task.corpus)
  check_blocks_fit(store, tokenizer, task.model.block_length, model_dir)
  index = None if corpus else _published_index(model_dir, store,
                                                towers["retriever"].doc_input)
  retriever, reader = (precision.with_compute_dtype(towers[name], compute_dtype)
                       for name in ("retriever", "reader"))
  return Prober(retriever, reader, tokenizer, store, index,
                task.model.query_length, task.model.block_length, k, task.mlm_loss)


def format_probe(probe: Probe, text_chars: int = 160) -> str:
  """A human-readable probe: the filled text, then a table of the candidates."""
  masks = ", ".join(f"{t} ({p:.3f})" for t, p in zip(probe.tokens, probe.token_probabilities))
  lines = [f"x: {probe.text}", f"y: {probe.filled}",
           f"   p(y|x) = {probe.probability:.4f}   per [MASK]: {masks}",
           f"   without retrieval: p(y|∅,x) = {probe.no_retrieval_probability:.4f}; the reader "
           f"alone fills {' '.join(probe.no_retrieval_tokens)} "
           f"({probe.no_retrieval_tokens_probability:.4f})",
           "   p(z|x)  p(y|z,x)  RU(z|x)  block"]
  for e in probe.evidence:
    block = "∅ (null document)" if e.block_id is None else f"#{e.block_id} {e.title}: {e.text}"
    block = block if len(block) <= text_chars else block[:text_chars] + "..."
    lines.append(f"   {e.probability:6.3f}  {e.answer_probability:8.4f}  "
                 f"{e.retrieval_utility:+7.2f}  {block}")
  return "\n".join(lines)


def probe_texts(prober: Prober, texts: Sequence[str], as_json: bool = False) -> List[str]:
  """What `realm-probe` prints for `texts`: a table, or a JSON object, per text."""
  probes = prober.probe_many(texts)
  if as_json:
    return [json.dumps(p.to_json(), ensure_ascii=False) for p in probes]
  return [format_probe(p) for p in probes]
