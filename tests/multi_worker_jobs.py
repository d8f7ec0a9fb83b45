"""Jobs of 2 worker processes on localhost under MultiWorkerMirroredStrategy (`TF_CONFIG`,
free ports), and the single-worker runs they are compared with, for the multi-worker tests and
the `realm-pretrain` binary's: the tiny ICT and pre-training commands, their metrics."""
import json
import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 900


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("localhost", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def env(tf_config=None):
  variables = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  if tf_config is not None:
    variables["TF_CONFIG"] = json.dumps(tf_config)
  return variables


def start_workers(command, log_dir, num_workers=2):
  """Starts `command` as each worker of a `num_workers`-worker job; returns (processes, logs)."""
  workers = [f"localhost:{port}" for port in _free_ports(num_workers)]
  processes, logs = [], []
  for index in range(num_workers):
    logs.append(os.path.join(log_dir, f"worker-{index}.log"))
    variables = env({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
    variables["TMPDIR"] = os.path.join(log_dir, f"tmp-{index}")  # a non-chief's scratch
    os.makedirs(variables["TMPDIR"], exist_ok=True)
    with open(logs[-1], "w") as log:
      processes.append(subprocess.Popen(
          command + ["--strategy=multi_worker_mirrored"], cwd=ROOT, stdout=log,
          stderr=subprocess.STDOUT, env=variables))
  return processes, logs


def assert_scratch_removed(log_dir):
  """No worker left its scratch output directory behind."""
  for name in os.listdir(log_dir):
    if name.startswith("tmp-"):
      left = [n for n in os.listdir(os.path.join(log_dir, name)) if "realm-tf-worker" in n]
      assert not left, (name, left)


def read(path):
  with open(path) as f:
    return f.read()


def wait(processes, logs, timeout=TIMEOUT_S):
  """Waits for every worker; returns their logs after checking they all succeeded."""
  try:
    for process in processes:
      process.wait(timeout=max(1.0, timeout))
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
        process.wait()
  texts = [read(log) for log in logs]
  for process, text in zip(processes, texts):
    assert process.returncode == 0, text[-3000:]
  return texts


def run_multi_worker(command, log_dir):
  return wait(*start_workers(command, log_dir))


def run_single(command):
  result = subprocess.run(command, cwd=ROOT, env=env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout + result.stderr


def metrics(path):
  """The last record of each step of a metrics.jsonl, in step order."""
  by_step = {}
  with open(path) as f:
    for line in f:
      record = json.loads(line)
      by_step[record["step"]] = record
  return [by_step[s] for s in sorted(by_step)]


# The tiny model's training flags, of the ICT and the pre-training runs.
_TINY_TRAINING = ("--encoder=tiny", "--init_weights=", "--dropout=0", "--batch_size=8",
                  "--query_length=16", "--block_length=24", "--learning_rate=1e-3", "--seed=3")


def ict_command(world, model_dir, *extra):
  """`realm-ict` of the tiny model on `world` (`tiny_world.write_pipeline_and_vocab`'s)."""
  directory, vocab = world
  return [sys.executable, "-m", "realm_tf.ict", f"--corpus={directory}",
          f"--model_dir={model_dir}", f"--vocab_file={vocab}", *_TINY_TRAINING,
          "--compute_dtype=float32", *extra]


def pretrain_command(world, model_dir, *extra):
  """`realm-pretrain` of the tiny model on `world` (`tiny_world.write_pipeline_and_vocab`'s),
  4 candidates from an exact index."""
  directory, vocab = world
  return [sys.executable, "-m", "realm_tf.pretrain", f"--corpus_dir={directory}",
          f"--examples_dir={directory}", f"--model_dir={model_dir}", f"--vocab_file={vocab}",
          *_TINY_TRAINING, "--num_candidates=4", "--index_kind=brute_force", *extra]
