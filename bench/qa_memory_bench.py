"""Peak memory of Open-QA fine-tuning and inference at BERT-base size.

    python bench/qa_memory_bench.py                      # both scenarios, B=1 question
    python bench/qa_memory_bench.py --batch_size=4 --output=results/qa_memory.json

REALM (§4.3) runs the fine-tuned model on one 12 GB GPU; this measures ours at REALM's shapes:
BERT-base query tower, frozen doc tower and reader, top-5 blocks read (reader inputs of 320),
the retriever loss over the top 5000 ([B, 5000, 128] block embeddings, an input the host reads
from the memory-mapped file), AdamW. Each scenario runs in a fresh process: `finetune`
(`open_qa_step.make_replica_step`: loss, gradients, AdamW) and `inference` (query tower and
span scores, no gradients). Reported: `device_peak_gib`, TensorFlow's allocator peak on GPU:0
or else CPU:0 (what a GPU must hold), `rss_peak_gib`, the process's peak resident memory, and
analytic sizes (parameters, Adam slots, the 13,353,718 block embeddings in each storage dtype).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

WIKIPEDIA_BLOCKS = 13_353_718
GIB = 1 << 30


def _inputs(batch_size, read_k, retrieve_k, query_length, reader_length, dim, vocab):
  """Synthetic prepared inputs with the `FineTuner.prepare_batch` names and shapes."""
  rng = np.random.default_rng(0)
  query_ids = rng.integers(5, vocab, [batch_size, query_length]).astype(np.int32)
  reader_ids = rng.integers(5, vocab, [batch_size, read_k, reader_length]).astype(np.int32)
  question = reader_length - 288 - 1  # [CLS] x [SEP] takes what the 288-wordpiece block leaves
  types = np.zeros_like(reader_ids)
  types[..., question:] = 1
  block_mask = np.zeros_like(reader_ids)
  block_mask[..., question:reader_length - 1] = 1
  gold_starts = np.full([batch_size, read_k, 4], -1, np.int32)
  gold_ends = np.full([batch_size, read_k, 4], -1, np.int32)
  gold_starts[:, 0, 0], gold_ends[:, 0, 0] = question + 10, question + 12
  has_answer = np.zeros([batch_size, retrieve_k], bool)
  has_answer[:, 0] = True
  return {
      "query_input_word_ids": query_ids, "query_input_mask": np.ones_like(query_ids),
      "query_input_type_ids": np.zeros_like(query_ids),
      "reader_input_word_ids": reader_ids, "reader_input_mask": np.ones_like(reader_ids),
      "reader_input_type_ids": types, "reader_block_mask": block_mask,
      "rows": rng.integers(0, WIKIPEDIA_BLOCKS, [batch_size, retrieve_k]).astype(np.int64),
      "block_embeddings": rng.standard_normal([batch_size, retrieve_k, dim]).astype(np.float32),
      "has_answer": has_answer, "gold_starts": gold_starts, "gold_ends": gold_ends,
  }


def run_scenario(args) -> dict:
  """Runs one scenario in this process and returns its figures."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from realm_tf import presets  # pylint: disable=g-import-not-at-top
  from realm_tf.qa import open_qa_step  # pylint: disable=g-import-not-at-top
  from realm_tf.training import optimizer as optimization  # pylint: disable=g-import-not-at-top

  device = "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"
  rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  config = presets.ModelConfig(encoder=presets.encoder_config("bert_base", 30522))
  with tf.device(device):
    retriever, reader = presets.build_models(config)
  inputs = {n: tf.constant(v) for n, v in _inputs(
      args.batch_size, args.read_k, args.retrieve_k, config.query_length,
      config.reader_length, config.projection_size, config.encoder.vocab_size).items()}
  if args.scenario == "finetune":
    optimizer = optimization.create_optimizer(optimization.OptimizerConfig())
    step = tf.function(open_qa_step.make_replica_step(retriever, reader, optimizer,
                                                      args.batch_size))
  else:
    def infer(prepared):
      query = {n: prepared[f"query_{n}"] for n in ("input_word_ids", "input_mask",
                                                  "input_type_ids")}
      flat = {n: tf.reshape(prepared[f"reader_{n}"], [-1, config.reader_length])
              for n in ("input_word_ids", "input_mask", "input_type_ids", "block_mask")}
      query_emb = retriever.embed_query(query, training=False)
      logits, _, _ = reader.span_logits({n: flat[n] for n in query}, flat["block_mask"],
                                        training=False)
      return {"query": query_emb, "best": tf.reduce_max(logits)}
    step = tf.function(infer)
  parameters = int(sum(np.prod(v.shape) for v in retriever.variables + reader.variables))
  trained = int(sum(np.prod(v.shape) for v in open_qa_step.query_tower_variables(retriever) +
                    open_qa_step.reader_variables(reader)))
  with tf.device(device):
    step(inputs)  # traces
    tf.config.experimental.reset_memory_stats(device)
    start = time.perf_counter()
    for _ in range(args.steps):
      result = step(inputs)
    _ = {k: v.numpy() for k, v in result.items()}
    seconds = (time.perf_counter() - start) / args.steps
  return {
      "scenario": args.scenario, "device": device, "batch_size": args.batch_size,
      "read_k": args.read_k, "retrieve_k": args.retrieve_k,
      "reader_length": config.reader_length, "block_length": config.block_length,
      "device_peak_gib": tf.config.experimental.get_memory_info(device)["peak"] / GIB,
      "rss_peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
      "rss_before_models_gib": rss_before / GIB,
      "seconds_per_step": seconds,
      "parameters_millions": parameters / 1e6,
      "trained_parameters_millions": trained / 1e6,
      "weights_gib": parameters * 4 / GIB,
      "adam_slots_gib": (2 * trained * 4 / GIB) if args.scenario == "finetune" else 0.0,
      "wikipedia_block_embeddings_gib": WIKIPEDIA_BLOCKS * config.projection_size * 4 / GIB,
      "wikipedia_block_embeddings_16bit_gib": (
          WIKIPEDIA_BLOCKS * config.projection_size * 2 / GIB),
  }


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--scenario", choices=("finetune", "inference"), default=None,
                      help="Run one scenario in this process (default: both, each fresh).")
  parser.add_argument("--batch_size", type=int, default=1, help="Questions per step.")
  parser.add_argument("--read_k", type=int, default=5, help="Blocks read per question.")
  parser.add_argument("--retrieve_k", type=int, default=5000,
                      help="Blocks in the retriever loss.")
  parser.add_argument("--steps", type=int, default=2, help="Measured steps after tracing.")
  parser.add_argument("--output", default="", help="Write the figures as JSON here.")
  args = parser.parse_args(argv)
  if args.scenario:
    print(json.dumps(run_scenario(args)))
    return
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from bench import bench_utils  # pylint: disable=g-import-not-at-top  (not in the scenarios)
  print(bench_utils.machine_line(), flush=True)
  results = []
  for scenario in ("finetune", "inference"):
    command = [sys.executable, os.path.abspath(__file__), f"--scenario={scenario}"] + [
        f"--{name}={getattr(args, name)}" for name in ("batch_size", "read_k", "retrieve_k",
                                                      "steps")]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    results.append(json.loads(output.strip().splitlines()[-1]))
    print(json.dumps(results[-1], indent=2), flush=True)
  if args.output:
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  main()
