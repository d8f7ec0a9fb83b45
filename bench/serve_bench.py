"""`realm-serve` under load on 127.0.0.1 against sequential `Asker` calls, in one run.

Starts the real binary (`python -m realm_tf.serve`, its own process) on a free loopback port,
then for each concurrency C sends `--questions` questions from C clients at once
(`httpx.AsyncClient`, each client sends its next question when its answer arrives) and
reports p50 / p99 latency, questions/s and errors (any non-200 reply or failed request). The
baseline answers the same questions one at a time with `Asker.ask` in this process (no
HTTP). Every reply is checked against `Asker`'s answer to the same question.

    python bench/serve_bench.py --model_dir=/tmp/serve_qa/model
    python bench/serve_bench.py --model_dir=results/demo/qa --questions_file=Q.jsonl \
        --questions=120 --concurrency=1,8,32 --compute_dtype=float32

FLOPs per question (the query tower and the reader's encoder, `embedding_bench.encoder_flops`)
are counted as the code pads them: "padded" as before #63 (questions at `query_length`, reader
inputs at the longest of the question's k rounded up to 32), "trimmed" with length buckets of
16 (`models.length_buckets`), "real" without padding; "of peak" is executed FLOP/s at the row's
questions/s over the run's float32 matmul peak.

Questions: the tiny world's (`realm_tf.tiny_world.QUESTIONS`), cycled, or `--questions_file`
(JSONL with a "question" field). Results: bench/results/<--name>.{json,md}.
"""
import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import bench_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from bench.embedding_bench import encoder_flops  # pylint: disable=g-import-not-at-top,wrong-import-position
import httpx  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.qa import ask_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import tiny_world  # pylint: disable=g-import-not-at-top,wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def questions_of(path: str, count: int):
  if path:
    with open(path, encoding="utf-8") as f:
      pool = [json.loads(line)["question"] for line in f if line.strip()]
  else:
    pool = [question for question, _ in tiny_world.QUESTIONS]
  return [pool[i % len(pool)] for i in range(count)]


def _ceil(value, multiple):
  return -(-value // multiple) * multiple


def flops_per_question(asker, questions):
  """{"real", "padded", "trimmed"}: mean encoder FLOPs of one question asked alone."""
  system, config = asker.system, asker.model.config
  encoder, projection = config.encoder, config.projection_size
  totals = {"real": 0.0, "padded": 0.0, "trimmed": 0.0}
  for question in questions:
    _, query_ids, _, rows = system._search([question], system.k)  # pylint: disable=protected-access
    titles, texts = system.gather_blocks(rows)
    inputs = system.featurizer.reader_inputs(query_ids, titles.astype(str), texts.astype(str))
    reads = inputs["input_mask"].numpy().sum(axis=1)
    query = int(query_ids.row_lengths().numpy()[0]) + 2
    longest = min(_ceil(int(reads.max()), 32), system.featurizer.reader_length)
    for name, q_len, r_lens in (("real", query, reads),
                                ("padded", system.featurizer.query_length, [longest] * len(reads)),
                                ("trimmed", _ceil(query, 16), [_ceil(int(n), 16) for n in reads])):
      totals[name] += encoder_flops(encoder, q_len, projection) + sum(
          encoder_flops(encoder, int(n), 0) for n in r_lens)
  return {name: value / len(questions) for name, value in totals.items()}


def summary(name: str, latencies, seconds: float, errors: int, mismatches: int, **extra):
  ms = 1000 * np.asarray(latencies)
  return {"mode": name, **extra, "questions": len(latencies) + errors,
          "p50_ms": float(np.percentile(ms, 50)) if len(ms) else float("nan"),
          "p99_ms": float(np.percentile(ms, 99)) if len(ms) else float("nan"),
          "questions_per_s": (len(latencies) + errors) / seconds, "errors": errors,
          "mismatches": mismatches}


def sequential(asker, questions, expected):
  latencies, mismatches = [], 0
  start = time.perf_counter()
  for question in questions:
    begin = time.perf_counter()
    answer = asker.ask(question)
    latencies.append(time.perf_counter() - begin)
    mismatches += answer.answer != expected[question]
  return summary("sequential Asker.ask", latencies, time.perf_counter() - start, 0, mismatches,
                 concurrency=1)


async def load(url: str, questions, concurrency: int, expected):
  latencies, errors, mismatches = [], 0, 0
  pending = list(reversed(questions))
  limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

  async def client(http):
    nonlocal errors, mismatches
    while pending:
      question = pending.pop()
      begin = time.perf_counter()
      try:
        reply = await http.post("/v1/ask", json={"question": question})
      except httpx.HTTPError:
        errors += 1
        continue
      if reply.status_code != 200:
        errors += 1
        continue
      latencies.append(time.perf_counter() - begin)
      mismatches += reply.json()["answer"] != expected[question]

  async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:
    start = time.perf_counter()
    await asyncio.gather(*[client(http) for _ in range(concurrency)])
    seconds = time.perf_counter() - start
  return summary("realm-serve", latencies, seconds, errors, mismatches,
                 concurrency=concurrency)


def start_server(args):
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  process = subprocess.Popen(
      [sys.executable, "-m", "realm_tf.serve", f"--model_dir={args.model_dir}",
       f"--port={port}", f"--max_batch_size={args.max_batch_size}",
       f"--max_wait_ms={args.max_wait_ms}"] + (
           [f"--compute_dtype={args.compute_dtype}"] if args.compute_dtype else []), cwd=ROOT)
  url = f"http://127.0.0.1:{port}"
  deadline = time.monotonic() + 600
  while True:
    if process.poll() is not None:
      raise SystemExit(f"realm-serve exited with status {process.returncode}")
    try:
      if httpx.get(url + "/healthz").status_code == 200:
        return process, url
    except httpx.TransportError:
      if time.monotonic() > deadline:
        raise
      time.sleep(0.2)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--questions", type=int, default=500)
  parser.add_argument("--questions_file", default="")
  parser.add_argument("--concurrency", default="1,8,32")
  parser.add_argument("--compute_dtype", default="",
                      help="the answering precision (default: the binary's and Asker's)")
  parser.add_argument("--max_batch_size", type=int, default=16)
  parser.add_argument("--max_wait_ms", type=float, default=5.0)
  parser.add_argument("--name", default="serve")
  args = parser.parse_args()
  print(bench_utils.machine_line(), flush=True)
  questions = questions_of(args.questions_file, args.questions)
  asker = ask_lib.Asker(args.model_dir, **(
      {"compute_dtype": args.compute_dtype} if args.compute_dtype else {}))
  flops = flops_per_question(asker, sorted(set(questions))[:50])
  executed = flops["trimmed" if hasattr(asker.system, "length_multiple") else "padded"]
  print({"flops_per_question": flops, "executed": executed}, flush=True)
  expected = {q: asker.ask(q).answer for q in set(questions)}  # also traces the functions
  rows = [sequential(asker, questions, expected)]
  print(rows[-1], flush=True)
  process, url = start_server(args)
  try:
    asyncio.run(load(url, questions[:32], 4, expected))  # warm connections and batch shapes
    for concurrency in (int(c) for c in args.concurrency.split(",")):
      rows.append(asyncio.run(load(url, questions, concurrency, expected)))
      print(rows[-1], flush=True)
  finally:
    process.terminate()
    process.wait(timeout=60)
  baseline = rows[0]["questions_per_s"]
  peak = bench_utils.machine_peaks(remeasure=True)["float32"]
  for row in rows:
    row["vs_sequential"] = row["questions_per_s"] / baseline
    row["gflop_per_question"] = executed / 1e9
    row["of_fp32_peak"] = executed * row["questions_per_s"] / peak
  rows.append({"mode": "flops", **{f"{k}_gflop": v / 1e9 for k, v in flops.items()},
               "load_average": os.getloadavg()[0]})
  markdown = (f"{bench_utils.machine_line()}\n\nmodel: {args.model_dir}; {len(questions)} "
              f"questions per row; realm-serve --max_batch_size={args.max_batch_size} "
              f"--max_wait_ms={args.max_wait_ms}\n\n" + bench_utils.markdown_table(
                  rows[:-1], ["mode", "concurrency", "questions", "p50_ms", "p99_ms",
                              "questions_per_s", "vs_sequential", "gflop_per_question",
                              "of_fp32_peak", "errors", "mismatches"]) +
                f"\n\nGFLOP per question (alone): {rows[-1]}\n")
  print(markdown)
  print(bench_utils.write_results(args.name, rows, markdown))


if __name__ == "__main__":
  main()
