"""The Open-QA stages of `bench/paper_scale.py`: fine-tuning and `realm-serve` over N blocks.

  qa_index   the fine-tuning run's step-0 index, published into its model directory as the
             refresher publishes one (embeddings file, sharded ScaNN index, doc-embedder
             snapshot): seconds, peak RSS
  finetune   `realm-finetune` (MiniLM towers from the pre-training stage's checkpoint, top
             5,000 in the retriever loss) for a few steps: seconds, peak RSS
  serve      `realm-serve` of that model: load seconds, p50/p99 of one question over HTTP
             reading k = 5 (the default), 2 and 1 blocks, peak RSS

Embedding N blocks is not timed on 2 cores (the embedding pipeline's work), so the index holds
the synthetic embeddings, with the rows the fine-tuner samples to check that an index is its
doc tower's (`IndexRefresher.matches_doc_tower`) set to that tower's embeddings of those
blocks: the fine-tuner then reuses it, as a restarted run reuses its own.
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import urllib.request

import numpy as np

from bench import paper_scale_data as data

STORAGE = "float16"
SCANN = {"num_leaves": 1000, "num_leaves_to_search": 200}
SHARD_SIZE = 1_000_000
_FINETUNE_STEPS = 4
_CHECKED_ROWS = 4  # IndexRefresher.matches_doc_tower's default sample
_TOP_K = (5, 2, 1)  # realm-serve's default --k first


def _peak() -> int:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _binary(name: str) -> str:
  return os.path.join(os.path.dirname(sys.executable), name)


def _models(paths):
  """The fine-tuner's retriever as `realm-finetune --init_checkpoint=<pre-training run>`
  builds it (the checkpoint's shared towers in both), and its tokenizer."""
  # pylint: disable=import-outside-toplevel
  from realm_tf import presets
  from realm_tf import pretrained
  from realm_tf.qa.index_snapshots import snapshot_query_tower
  tokenizer = pretrained.minilm_tokenizer()
  config = presets.ModelConfig(encoder=presets.encoder_config("minilm_l6", tokenizer.vocab_size),
                               projection_size=data.DIM, retriever_head="realm")
  retriever, reader = presets.build_models(config)
  presets.initialize(retriever, reader, config,
                     presets.InitConfig(checkpoint=os.path.join(paths["pretrain"],
                                                                "checkpoints")))
  snapshot_query_tower(retriever)
  return retriever, tokenizer


def stage_qa_index(n: int, paths) -> dict:
  """Publishes `<finetune>/index/step-00000000` and `<finetune>/doc_embedder/step-00000000`."""
  # pylint: disable=import-outside-toplevel
  from realm_tf.mips import index_builder
  from realm_tf.mips import index_publisher
  from realm_tf.qa import index_snapshots
  from realm_tf.retrieval import embedding
  from realm_tf.retrieval import embedding_file
  from realm_tf.retrieval.corpus import Corpus
  from realm_tf.signatures.doc_embedder import export_doc_embedder
  model_dir = paths["finetune"]
  shutil.rmtree(model_dir, ignore_errors=True)
  started = time.perf_counter()
  corpus = Corpus.load(paths["corpus"])
  retriever, tokenizer = _models(paths)
  special = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
  rows = np.unique(np.linspace(0, n - 1, _CHECKED_ROWS).astype(int))
  title_ids, body_ids = corpus.wordpieces(tokenizer)
  tower = embedding.DocTower(retriever, *special, block_length=288)
  checked = embedding.embed_blocks(tower, title_ids.gather(rows), body_ids.gather(rows))
  index_root = os.path.join(model_dir, index_snapshots.INDEX_ROOT)
  version = index_publisher.version_for_step(0)
  os.makedirs(index_root)
  path = os.path.join(index_root, f"{version}.embeddings.tmp-bench.npy")
  embeddings = embedding_file.create(path, n, data.DIM, STORAGE)
  synthetic = np.load(paths["embeddings"], mmap_mode="r")
  for start in range(0, n, 1 << 20):
    embeddings[start:start + (1 << 20)] = synthetic[start:start + (1 << 20)]
  embeddings[rows] = checked
  embeddings.flush()
  metadata = {"snapshot_step": 0, "corpus_fingerprint": corpus.fingerprint,
              "embedding_dtype": "float32", **embedding_file.metadata(path, STORAGE)}
  settings = index_builder.ScannSettings(**SCANN)
  sharding = index_builder.Sharding(SHARD_SIZE)

  def write(directory: str) -> None:
    embedding_file.move_into(path, directory)
    index_builder.save_index(embeddings, directory, "scann", settings, sharding)

  index_publisher.publish(write, index_root, version, metadata)
  export_doc_embedder(retriever, os.path.join(model_dir, index_snapshots.EMBEDDER_ROOT, version),
                      *special, block_length=288, snapshot_step=0, tokenizer=tokenizer)
  return {"qa_index_s": time.perf_counter() - started, "qa_index_peak_rss": _peak()}


def _write_questions(path: str, corpus_dir: str, count: int = 64) -> None:
  """ORQA-style questions whose answers are words of the corpus's first blocks."""
  from realm_tf.retrieval.corpus import Corpus  # pylint: disable=import-outside-toplevel
  corpus = Corpus.load(corpus_dir)
  with open(path, "w", encoding="utf-8") as f:
    for row in range(count):
      words = [w for w in corpus.texts[row].split() if w.isalpha() and len(w) > 4] or ["the"]
      f.write(json.dumps({"question": f"what is said of {corpus.titles[row]}?",
                          "answer": [words[len(words) // 2]]}) + "\n")


def stage_finetune(n: int, paths) -> dict:
  """`realm-finetune` for a few steps over the published step-0 index; fails rather than
  embed the N blocks if the index were not the doc tower's."""
  del n
  for name in os.listdir(paths["finetune"]):  # a fresh run over the published step-0 index
    if name not in ("index", "doc_embedder"):
      path = os.path.join(paths["finetune"], name)
      shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
  questions = os.path.join(paths["finetune"], "train.jsonl")
  _write_questions(questions, paths["corpus"])
  command = [_binary("realm-finetune"), f"--model_dir={paths['finetune']}",
             f"--corpus={paths['corpus']}", f"--train_data={questions}",
             f"--init_checkpoint={os.path.join(paths['pretrain'], 'checkpoints')}",
             "--retriever_head=realm", f"--projection_size={data.DIM}",
             f"--num_steps={_FINETUNE_STEPS}", "--batch_size=4", "--retriever_top_k=5000",
             "--embedding_dtype=float32", f"--embedding_storage_dtype={STORAGE}",
             "--checkpoint_every=100000", "--eval_every=100000"]
  command += [f"--scann_{key}={value}" for key, value in SCANN.items()]
  command += [f"--index_shard_size={SHARD_SIZE}"]
  started = time.perf_counter()
  process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
  log = []
  for line in process.stdout:
    log.append(line)
    if "built by another doc tower" in line:
      process.kill()
      raise RuntimeError("realm-finetune re-embeds the corpus:\n" + "".join(log[-20:]))
  if process.wait():
    raise RuntimeError("realm-finetune failed:\n" + "".join(log[-40:]))
  return {"finetune_s": time.perf_counter() - started,
          "finetune_peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}


def _post(port: int, question: str, top_k: int) -> dict:
  request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/ask",
                                   json.dumps({"question": question, "top_k": top_k}).encode(),
                                   {"Content-Type": "application/json"})
  with urllib.request.urlopen(request, timeout=600) as response:
    return json.load(response)


def stage_serve(n: int, paths, port: int = 8391, questions: int = 100) -> dict:
  """`realm-serve` of the fine-tuned model: seconds until healthy, one question at a time."""
  del n
  started = time.perf_counter()
  process = subprocess.Popen([_binary("realm-serve"), f"--model_dir={paths['finetune']}",
                              f"--port={port}"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
  try:
    while True:
      if process.poll() is not None:
        raise RuntimeError("realm-serve exited:\n" + process.stderr.read()[-3000:])
      try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5):
          break
      except OSError:
        time.sleep(1)
    load_s = time.perf_counter() - started
    with open(os.path.join(paths["finetune"], "train.jsonl"), encoding="utf-8") as f:
      asked = [json.loads(line)["question"] for line in f]
    result = {"serve_load_s": load_s}
    for top_k in _TOP_K:  # blocks read per question: the default first
      _post(port, asked[0], top_k)
      latencies = []
      for q in range(questions):
        started = time.perf_counter()
        reply = _post(port, asked[q % len(asked)], top_k)
        latencies.append(time.perf_counter() - started)
        if len(reply.get("evidence", [])) != top_k:
          raise RuntimeError(f"realm-serve answered without {top_k} blocks: {reply}")
      suffix = "" if top_k == _TOP_K[0] else f"_k{top_k}"
      result[f"serve_p50_ms{suffix}"] = 1e3 * float(np.percentile(latencies, 50))
      result[f"serve_p99_ms{suffix}"] = 1e3 * float(np.percentile(latencies, 99))
    with open(f"/proc/{process.pid}/status", encoding="ascii") as f:
      result["serve_peak_rss"] = next(int(line.split()[1]) * 1024 for line in f
                                      if line.startswith("VmHWM:"))
  finally:
    process.kill()
    process.wait()
  return result


STAGES = {"qa_index": stage_qa_index, "finetune": stage_finetune, "serve": stage_serve}
