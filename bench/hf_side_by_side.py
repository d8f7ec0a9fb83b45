"""realm_tf against Hugging Face transformers' REALM (PyTorch, CPU), side by side in one run.

  python bench/hf_side_by_side.py --model_dir=QA_MODEL --num_blocks=64 --questions=30

QA_MODEL: a fine-tuned QA model directory (BENCHMARKS.md §10: `bench/real_data.py
--rows=finetuned`'s). 1. Document embedding at BERT-base size (768×12, projection 128) of
the same real blocks, batch size and length bucketing for both, random weights (speed does not
depend on them): HF `RealmEmbedder` in float32 and under `torch.autocast` bfloat16, our doc
tower in float32 and in the machine's best precision. 2. `ask` latency, one question at a time
(p50/p95 over `--questions` NQ-open dev questions), question string to answer string: our
`Asker` against HF `RealmForOpenQA` of the model's sizes with a `RealmRetriever` over the same
blocks and the model's own block embeddings. Both frameworks run `--threads` intra-op threads.
Writes bench/results/hf_side_by_side.{md,json}.
"""
import os
import sys
import time

import numpy as np
import tensorflow as tf
import torch
import transformers
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from bench import bench_utils
from realm_tf import configs
from realm_tf import pretrained
from realm_tf.demo import wikipedia
from realm_tf.models import precision
from realm_tf.qa import ask_lib
from realm_tf.qa import model as model_lib
from realm_tf.real_data import questions
from realm_tf.tokenization.featurizers import BlockFeaturizer
# pylint: enable=g-import-not-at-top,wrong-import-position

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Fine-tuned QA model directory.",
                                 required=True)
_NUM_BLOCKS = flags.DEFINE_integer("num_blocks", 64, "Blocks embedded per measurement.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Blocks per embedding call.")
_BUCKET = flags.DEFINE_integer("bucket", 32, "Trimmed lengths are rounded up to a multiple.")
_QUESTIONS = flags.DEFINE_integer("questions", 40, "Questions asked one at a time.")
_K = flags.DEFINE_integer("k", 5, "Evidence blocks read per question.")
_THREADS = flags.DEFINE_integer("threads", 2, "Intra-op threads of TensorFlow and PyTorch.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Embedding passes timed (the best is kept).")


def bucketed_batches(features, batch_size, bucket):
  """[(numpy features trimmed to the batch's longest block)], blocks sorted by length."""
  lengths = features["input_mask"].sum(1)
  order = np.argsort(lengths, kind="stable")
  batches = []
  for start in range(0, len(order), batch_size):
    rows = order[start:start + batch_size]
    length = min(features["input_word_ids"].shape[1],
                 int(np.ceil(lengths[rows].max() / bucket) * bucket))
    batches.append({n: t[rows, :length] for n, t in features.items()})
  return batches


def hf_embedder_rate(batches, num_blocks, autocast: bool) -> float:
  """Blocks/s of HF `RealmEmbedder` (BERT-base, random weights) over `batches`."""
  config = transformers.RealmConfig(retriever_proj_size=128)  # BERT-base sizes by default
  model = transformers.RealmEmbedder(config).eval()
  inputs = [{"input_ids": torch.from_numpy(b["input_word_ids"].astype(np.int64)),
             "attention_mask": torch.from_numpy(b["input_mask"].astype(np.int64)),
             "token_type_ids": torch.from_numpy(b["input_type_ids"].astype(np.int64))}
            for b in batches]

  def run():
    with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
      for batch in inputs:
        model(**batch).projected_score.float().numpy()

  return num_blocks / bench_utils.best_time(run, repeats=_REPEATS.value, warmup=1)


def ours_embedder_rate(batches, num_blocks, compute_dtype: str) -> float:
  """Blocks/s of our doc tower (BERT-base, random weights) in `compute_dtype`."""
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.bert_base()))
  retriever.build()
  tower = precision.with_compute_dtype(retriever, compute_dtype)
  embed = tf.function(lambda f: tf.cast(tower.embed_documents(f, training=False), tf.float32),
                      reduce_retracing=True)
  inputs = [{n: tf.constant(t) for n, t in b.items()} for b in batches]

  def run():
    for batch in inputs:
      embed(batch).numpy()

  return num_blocks / bench_utils.best_time(run, repeats=_REPEATS.value, warmup=1)


def latencies(fn, items):
  """(p50, p95) seconds of `fn(item)` per item, after one warm-up call."""
  fn(items[0])
  seconds = []
  for item in items:
    start = time.perf_counter()
    fn(item)
    seconds.append(time.perf_counter() - start)
  return float(np.percentile(seconds, 50)), float(np.percentile(seconds, 95))


def hf_open_qa(model: model_lib.QAModel, k: int):
  """An HF `RealmForOpenQA` of `model`'s sizes over its corpus and block embeddings: question
  string -> answer string."""
  info = model.config
  encoder = info.encoder
  corpus = model.corpus
  config = transformers.RealmConfig(
      vocab_size=encoder.vocab_size, hidden_size=encoder.hidden_size,
      num_hidden_layers=encoder.num_layers, num_attention_heads=encoder.num_attention_heads,
      intermediate_size=encoder.intermediate_size, retriever_proj_size=model.doc_index.dim,
      span_hidden_size=info.span_hidden_size, max_span_width=info.max_span_width,
      reader_seq_len=info.reader_length, reader_beam_size=k, searcher_beam_size=k,
      num_block_records=len(corpus.texts))
  tokenizer = transformers.RealmTokenizerFast(os.path.join(model.directory,
                                                          model.info.vocab_file))
  records = np.array([f"{t} {x}".encode() for t, x in zip(corpus.titles, corpus.texts)],
                     dtype=object)
  retriever = transformers.RealmRetriever(block_records=records, tokenizer=tokenizer)
  qa = transformers.RealmForOpenQA(config, retriever=retriever).eval()
  qa.block_emb.copy_(torch.from_numpy(model.doc_index.embeddings))

  def ask(question):
    ids = tokenizer([question], max_length=info.query_length, truncation=True,
                    return_tensors="pt")
    with torch.inference_mode():
      _, answer_ids = qa(**ids, return_dict=False)
    return tokenizer.decode(answer_ids)

  return ask


def main(argv):
  del argv
  torch.set_num_threads(_THREADS.value)
  tf.config.threading.set_intra_op_parallelism_threads(_THREADS.value)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  print(bench_utils.machine_line(), flush=True)
  best = precision.best_compute_dtype()
  tokenizer = pretrained.minilm_tokenizer()
  titles, bodies = wikipedia.load_wiki_summaries(_NUM_BLOCKS.value)
  packed = BlockFeaturizer(tokenizer)((tf.constant(titles), tf.constant(bodies)))
  features = {n: t.numpy() for n, t in packed.items()}
  batches = bucketed_batches(features, _BATCH.value, _BUCKET.value)
  n = len(features["input_word_ids"])
  rows = [{"system": "HF RealmEmbedder (torch)", "precision": "float32",
           "blocks/s": hf_embedder_rate(batches, n, autocast=False)},
          {"system": "HF RealmEmbedder (torch)", "precision": "bfloat16 autocast",
           "blocks/s": hf_embedder_rate(batches, n, autocast=True)},
          {"system": "realm_tf doc tower", "precision": "float32",
           "blocks/s": ours_embedder_rate(batches, n, "float32")}]
  if best != "float32":
    rows.append({"system": "realm_tf doc tower", "precision": f"{best} (auto)",
                 "blocks/s": ours_embedder_rate(batches, n, best)})
  hf_fp32 = rows[0]["blocks/s"]
  for row in rows:
    row["vs HF float32"] = row["blocks/s"] / hf_fp32
    print(row, flush=True)

  asker = ask_lib.Asker(_MODEL_DIR.value, k=_K.value)
  dev = questions.answerable_split(asker.model.corpus.texts).dev[:_QUESTIONS.value]
  asked = [e.question for e in dev]
  ours = latencies(asker.ask, asked)
  hf = latencies(hf_open_qa(asker.model, _K.value), asked)
  ask_rows = [{"system": "HF RealmForOpenQA (torch)", "p50 ms": hf[0] * 1e3,
               "p95 ms": hf[1] * 1e3},
              {"system": "realm_tf Asker", "p50 ms": ours[0] * 1e3, "p95 ms": ours[1] * 1e3,
               "p50 speed-up": hf[0] / ours[0], "p95 speed-up": hf[1] / ours[1]}]
  for row in ask_rows:
    print(row, flush=True)
  markdown = (
      f"{bench_utils.machine_line()}; torch {torch.__version__}, transformers "
      f"{transformers.__version__}; {_THREADS.value} intra-op threads each.\n\n"
      f"Document embedding, BERT-base (768×12, projection 128), {n} real blocks (mean "
      f"{features['input_mask'].sum(1).mean():.0f} of 288 wordpieces), batch {_BATCH.value}, "
      f"both length-bucketed (multiples of {_BUCKET.value}):\n\n" +
      bench_utils.markdown_table(rows, ["system", "precision", "blocks/s", "vs HF float32"]) +
      f"\n`ask` latency, one question at a time, {len(asked)} NQ-open dev questions, K = "
      f"{_K.value}, {len(asker.model.corpus.texts):,} blocks, model {_MODEL_DIR.value} "
      f"(both float32):\n\n" +
      bench_utils.markdown_table(ask_rows, ["system", "p50 ms", "p95 ms", "p50 speed-up",
                                            "p95 speed-up"]))
  print(markdown)
  print(bench_utils.write_results("hf_side_by_side", rows + ask_rows, markdown))


if __name__ == "__main__":
  app.run(main)
