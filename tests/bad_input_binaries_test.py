"""Bad user input through the binaries' wrapper (`errors.run_main`, which `cli.run` gives every
`realm-*` binary and `python -m pipelines.*`): exit 2, no traceback, one last line naming the
input. In process (each case is the library call a binary makes), one subprocess for a check
made inside a binary's `main`."""
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from pipelines import salient_span_tagger
from realm_tf import errors
from realm_tf import tiny_world
from realm_tf.checkpoints import hf_safetensors
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.qa import ask_lib
from realm_tf.qa import datasets
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import pretraining_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _file(path, data):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(data)
  return str(path)


def _truncated_checkpoint(d):
  prefix = tf.train.Checkpoint(v=tf.Variable(tf.zeros([64, 64]))).write(str(d / "ckpt-1"))
  data = next(str(p) for p in d.iterdir() if ".data-" in p.name)
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)
  tf2_checkpoint.restore_checked(tf.train.Checkpoint(v=tf.Variable(tf.ones([64, 64]))), prefix)


def _checkpoint_of_another_vocabulary(d):
  prefix = tf.train.Checkpoint(embeddings=tf.Variable(tf.zeros([30, 8]))).write(str(d / "ckpt-1"))
  tf2_checkpoint.restore_checked(tf.train.Checkpoint(embeddings=tf.Variable(tf.zeros([25, 8]))),
                                 prefix)


def _examples_of_another_schema(d):
  path = d / "examples-00000-of-00001.tfrecord"
  with tf.io.TFRecordWriter(str(path)) as writer:
    writer.write(formats.block_example(1, "t", "a b", [5], [6, 7]))
  shards.write_manifest(str(d), "examples")
  pretraining_data.masked_query_dataset(str(d), tiny_world.tokenizer(), 2)


# case -> (what the binary does with the bad input under tmp_path d, the input its line names)
CASES = {
    "empty_vocabulary": (lambda d: WordpieceTokenizer.from_vocab_file(
        _file(d / "vocab.txt", b"\n")), "vocab.txt: empty vocabulary"),
    "vocabulary_without_specials": (lambda d: WordpieceTokenizer.from_vocab_file(
        _file(d / "vocab.txt", b"a\nb\n")), "vocab.txt: not a BERT vocabulary"),
    "junk_safetensors": (lambda d: hf_safetensors.read_hf_bert(
        _file(d / "model.safetensors", b"junk" * 8)), "model.safetensors: not a safetensors"),
    "truncated_checkpoint": (_truncated_checkpoint, "ckpt-1: truncated or damaged checkpoint"),
    "checkpoint_of_another_vocabulary": (
        _checkpoint_of_another_vocabulary, "ckpt-1: the checkpoint does not fit the model "
        "(Received incompatible tensor with shape (30, 8)"),
    "examples_of_another_schema": (_examples_of_another_schema,
                                   "examples-00000-of-00001.tfrecord: not a shard of"),
    "unknown_tagger": (lambda d: salient_span_tagger.load_tagger("nope"),
                       "--tagger=nope: unknown tagger"),
    "unknown_tagger_factory": (lambda d: salient_span_tagger.load_tagger("no_such_mod:f"),
                               "--tagger=no_such_mod:f: no such tagger factory"),
    "unknown_pyserini_set": (lambda d: datasets.load_examples("pyserini:nope"),
                             "pyserini:nope: unknown pyserini question set"),
    "empty_question_file": (lambda d: datasets.load_examples(_file(d / "q.jsonl", b"")),
                            "q.jsonl: no questions"),
    "whitespace_question_file": (lambda d: datasets.load_examples(
        _file(d / "q.tsv", b" \n\t\n")), "q.tsv: no questions"),
    "latin1_question_file": (lambda d: datasets.load_examples(
        _file(d / "q.tsv", "s\xe8te\t['x']\n".encode("latin-1"))), "q.tsv:1: not UTF-8"),
    "question_file_is_a_directory": (lambda d: datasets.load_examples(str(d)),
                                     ": is a directory, not a question file"),
    "training_model_dir_is_a_file": (lambda d: run_experiment(overrides.override(
        registry.get("ict"), {"trainer.model_dir": _file(d / "run", b"x")})),
                                     "run: is a file, not a directory (--model_dir)"),
    "model_dir_is_a_file": (lambda d: ask_lib.Asker(_file(d / "model", b"x")),
                            "model is not a fine-tuned QA model"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_ends_in_one_line_naming_it(case, tmp_path, capsys):
  run, names = CASES[case]
  with pytest.raises(SystemExit) as exit_:
    errors.run_main("realm-x", lambda argv: run(tmp_path))([])
  assert exit_.value.code == errors.EXIT_BAD_INPUT
  stderr = capsys.readouterr().err
  assert "Traceback" not in stderr
  last = stderr.strip().splitlines()[-1]
  assert last.startswith("realm-x: ") and names in last, last


def test_a_flag_check_inside_main_is_one_line(tmp_path):
  result = subprocess.run([sys.executable, "-m", "realm_tf.plot_ru", "--run=no_label",
                           f"--output={tmp_path / 'ru.png'}"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
  assert result.returncode == errors.EXIT_BAD_INPUT, result.stderr
  assert "Traceback" not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      "realm-plot-ru: --run must be label:path, got 'no_label'")
