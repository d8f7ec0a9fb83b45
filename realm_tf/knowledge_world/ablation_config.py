"""The knowledge-world ablation benchmark's settings: REALM Table 2 (and Figure 4) in miniature.

One seed writes a knowledge world (`writer.write_world`), trains one ICT warm-start, the
readers' masked-LM pre-training ("bert": the X sentences alone; "bert_pairs": each X sentence
paired with the block ICT ranks first) and the REALM pre-training runs (`PRETRAINING_RUNS`),
fine-tunes each system (`VARIANTS`: a retriever and a reader, `SYSTEMS`) on the world's
Open-QA questions and reports exact match (test), zero-shot recall@5 (test), recall@5 after
fine-tuning, pre-training's MLM accuracy, retrieval utility and null-document share, and time.
What each row is, the tiny towers' settings and why they are so: docs/ablations.md.

The seeds are run by `ablation_runner`, their statistics in `ablation_stats`, the report by
`ablation_report`.
"""
import dataclasses
import os
from typing import List, Optional, Tuple

from realm_tf import configs
from realm_tf.knowledge_world.world import WorldConfig

VARIANTS = ("no_retrieval", "orqa", "realm_retriever_bert_reader",
            "ict_retriever_realm_reader", "realm", "realm_random_token", "realm_random_span",
            "realm_spanbert", "realm_stale_index", "realm_sequence_mlm", "realm_per_document_spans",
            "realm_train_doc_tower", "realm_null_document", "realm_marker_reader")
# The variants of the loss forms and of the patent's fine-tuning, off the default table.
FORM_VARIANTS = VARIANTS[-5:]
TABLE_VARIANTS = VARIANTS[:-5]
# variant -> (retriever: "ict" or a pre-training run, reader: a pre-training run)
SYSTEMS = {"no_retrieval": ("ict", "bert"), "orqa": ("ict", "bert"),
           "realm_retriever_bert_reader": ("realm", "bert"),
           "ict_retriever_realm_reader": ("ict", "realm"),
           "realm": ("realm", "realm"),
           "realm_random_token": ("realm_random_token", "realm_random_token"),
           "realm_random_span": ("realm_random_span", "realm_random_span"),
           "realm_spanbert": ("realm_spanbert", "realm_spanbert"),
           "realm_stale_index": ("realm_stale_index", "realm_stale_index"),
           "realm_sequence_mlm": ("realm_sequence_mlm", "realm_sequence_mlm"),
           "realm_per_document_spans": ("realm", "realm"),
           "realm_train_doc_tower": ("realm", "realm"),
           "realm_null_document": ("realm", "realm"),
           "realm_marker_reader": ("realm", "realm")}
DESCRIPTIONS = {
    "no_retrieval": "No retrieval (BERT reader, null document only)",
    "orqa": "ORQA (ICT retriever + BERT reader)",
    "realm_retriever_bert_reader": "REALM retriever + BERT reader",
    "ict_retriever_realm_reader": "ICT retriever + REALM reader",
    "realm": "REALM (salient spans)",
    "realm_random_token": "REALM, random-token masks",
    "realm_random_span": "REALM, random-span masks",
    "realm_spanbert": "REALM, random spans (SpanBERT)",
    "realm_stale_index": "REALM, 30x staler index",
    "realm_sequence_mlm": "REALM, per-example MLM marginal (the paper's form)",
    "realm_per_document_spans": "REALM, fine-tuned with per-document span softmax",
    "realm_train_doc_tower": "REALM, fine-tuned with the doc tower trained",
    "realm_null_document": "REALM, fine-tuned with the null document",
    "realm_marker_reader": "REALM, fine-tuned with the patent's marker span reader",
}
# variant -> its fine-tuning's settings besides the benchmark's (dotted keys of the `open_qa`
# experiment); the doc-tower variant's refresh period is `refresh_every` * 5.
FINETUNE_SETTINGS = {
    "realm_per_document_spans": {"task.model.span_normalization": "per_document"},
    "realm_train_doc_tower": {"task.train_doc_tower": True},
    "realm_null_document": {"task.null_document": True},
    "realm_marker_reader": {"task.model.span_head": "markers"}}
# pre-training run -> (masking, reader it starts from: None = fresh)
PRETRAINING_RUNS = {"bert": ("random_token", None), "bert_pairs": ("random_token", None),
                     "realm": ("salient_span", "bert_pairs"),
                     "realm_random_token": ("random_token", "bert_pairs"),
                     "realm_random_span": ("random_span", "bert_pairs"),
                     "realm_spanbert": ("spanbert", "bert_pairs"),
                     "realm_stale_index": ("salient_span", "bert_pairs"),
                     "realm_sequence_mlm": ("salient_span", "bert_pairs")}
SEQUENCE_MLM_RUNS = ("realm_sequence_mlm",)  # pre-trained with mlm_loss="sequence"


def lineage(run: str) -> List[str]:
  """`run` ("ict" or a pre-training run) after the runs its reader starts from, first to last;
  [] for "ict", which is not a pre-training run."""
  chain = []
  while run is not None and run != "ict":
    chain.append(run)
    run = PRETRAINING_RUNS[run][1]
  return chain[::-1]


@dataclasses.dataclass(frozen=True)
class AblationConfig:
  """A benchmark run (every seed of it).

  Attributes:
    output_dir: the world, every model and the results go here, one `seed-N` directory per
      seed (replaced).
    world: the knowledge world (its seed is replaced by each run's seed).
    hidden_size, num_layers, num_attention_heads, intermediate_size: the BERT of every tower
      (`EncoderConfig`), with `initializer_range` and `dropout_rate`.
    projection_size, span_hidden_size: retrieval embedding size and span head width.
    ict_steps, ict_batch_size, ict_learning_rate: the ICT warm-start.
    bert_steps: each reader masked-LM pre-training without retrieval ("BERT", "BERT-pairs").
    pretrain_steps, pretrain_batch_size, pretrain_learning_rate, num_candidates: REALM
      pre-training, with `refresh_every`, `stale_factor`, `reader_warmup_steps` (K includes the
      null document; the stale variant refreshes every `refresh_every * stale_factor` steps;
      the first `reader_warmup_steps` train the reader alone, `PretrainTaskConfig`).
    finetune_steps, finetune_batch_size, finetune_learning_rate, reader_top_k: Open-QA
      fine-tuning, with `retriever_top_k` and `eval_every` (warm-up over the first 10% of the
      steps; the best dev checkpoint is evaluated on test).
    finetune_retriever_learning_rate: the query tower's own fine-tuning peak rate
      (`trainer.retriever_learning_rate`; None: `finetune_learning_rate`, the reader's). The
      retriever loss covers only the top `retriever_top_k` blocks the query tower itself
      retrieves, and it has a degenerate minimum: equal scores for those blocks
      (−log(answers/K) without ranking anything). On a seed whose retriever starts weak the
      query tower goes there at 3e-3 and recall falls to chance; a lower rate avoids that but
      slows the seeds that learn retrieval (docs/ablations.md, "Fine-tuning that lost the
      retriever"), so the presets keep None.
    recall_k: k of zero-shot recall@k.
    variants: which rows to run (their pre-training runs are trained as needed); default the
      rows of Table 2, not `FORM_VARIANTS`.
    seeds: one run per seed; `seed` is the run at hand.
  """
  output_dir: str
  world: WorldConfig = WorldConfig()
  hidden_size: int = 64
  num_layers: int = 2
  num_attention_heads: int = 4
  intermediate_size: int = 128
  initializer_range: float = 0.2
  dropout_rate: float = 0.0
  projection_size: int = 32
  span_hidden_size: int = 64
  ict_steps: int = 300
  bert_steps: int = 200
  ict_batch_size: int = 32
  ict_learning_rate: float = 3e-3
  pretrain_steps: int = 600
  pretrain_batch_size: int = 16
  pretrain_learning_rate: float = 1e-3
  num_candidates: int = 8
  refresh_every: int = 5
  stale_factor: int = 30
  reader_warmup_steps: int = 0
  finetune_steps: int = 300
  finetune_batch_size: int = 8
  finetune_learning_rate: float = 3e-3
  finetune_retriever_learning_rate: Optional[float] = None
  reader_top_k: int = 5
  retriever_top_k: int = 40
  eval_every: int = 100
  recall_k: int = 5
  variants: Tuple[str, ...] = TABLE_VARIANTS
  seeds: Tuple[int, ...] = (0, 1, 2)
  seed: int = 0

  def __post_init__(self):
    unknown = [v for v in self.variants if v not in VARIANTS]
    if unknown or not self.variants:
      raise ValueError(f"variants must be a non-empty subset of {VARIANTS}, got {unknown}")
    if not self.seeds or len(set(self.seeds)) != len(self.seeds):
      raise ValueError(f"seeds must be distinct and non-empty, got {self.seeds}")
    if (self.finetune_retriever_learning_rate is not None and
        self.finetune_retriever_learning_rate < 0):
      raise ValueError(f"finetune_retriever_learning_rate must be >= 0, got "
                       f"{self.finetune_retriever_learning_rate}")

  def for_seed(self, seed: int) -> "AblationConfig":
    """The run of one seed: its own directory, world and initialisation."""
    return dataclasses.replace(self, seed=seed, output_dir=os.path.join(self.output_dir,
                                                                         f"seed-{seed}"),
                               world=dataclasses.replace(self.world, seed=seed))

  def encoder(self, vocab_size: int, max_length: int = 128) -> configs.EncoderConfig:
    return configs.EncoderConfig(
        vocab_size=vocab_size, hidden_size=self.hidden_size, num_layers=self.num_layers,
        num_attention_heads=self.num_attention_heads,
        intermediate_size=self.intermediate_size, hidden_act="gelu",
        dropout_rate=self.dropout_rate, attention_dropout_rate=self.dropout_rate,
        max_position_embeddings=max(128, max_length), initializer_range=self.initializer_range)

  def pretraining_runs(self) -> List[str]:
    """The pre-training runs the variants need, each after the run its reader starts from."""
    runs = []
    for variant in self.variants:
      for system_run in SYSTEMS[variant]:
        runs += [run for run in lineage(system_run) if run not in runs]
    return runs


def full_config(output_dir: str) -> AblationConfig:
  """The benchmark preset: the table of docs/ablations.md (3 seeds)."""
  return AblationConfig(output_dir=output_dir, world=WorldConfig(num_entities=120),
                        ict_steps=600, ict_batch_size=32, bert_steps=200, pretrain_steps=600,
                        finetune_steps=150, eval_every=50)


def small_config(output_dir: str) -> AblationConfig:
  """The `make test` preset: REALM alone on a smaller world, every stage shortened, 3 seeds.
  No retrieval is not run: its reader reads a null document with no answer span, so its EM is
  0 by construction (docs/decisions.md). It compares no retrievers, so its retriever loss
  covers every block (fine-tuning learns retrieval it lacks)."""
  return AblationConfig(output_dir=output_dir, world=WorldConfig(num_entities=60),
                        ict_steps=300, ict_batch_size=32, bert_steps=100, pretrain_steps=250,
                        finetune_steps=150, eval_every=50, variants=("realm",),
                        retriever_top_k=1 << 20)
