"""Bad user input through the binaries' wrapper (`errors.run_main`, which `cli.run` gives every
`realm-*` binary and `python -m pipelines.*`): exit 2, no traceback, one last line naming the
input. In process (each case is the library call a binary makes), subprocesses for checks made
inside a binary's `main` or at flag parsing."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from pipelines import beam_runner
from pipelines import build_index_lib
from pipelines import salient_span_tagger
from realm_tf import configs
from realm_tf import errors
from realm_tf import tiny_world
from realm_tf.checkpoints import hf_safetensors
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.models.saving import load_model
from realm_tf.models.saving import save_model
from realm_tf.qa import ask_lib
from realm_tf.qa import datasets
from realm_tf.qa.model import ModelInfo
from realm_tf.retrieval import embedding_file
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import plots
from realm_tf.training import pretraining_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _file(path, data):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(data)
  return str(path)


def _cut_data_file(directory):
  data = next(str(p) for p in directory.iterdir() if ".data-" in p.name)
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)


def _cut_checkpoint(d):
  prefix = tf.train.Checkpoint(v=tf.Variable(tf.zeros([64, 64]))).write(str(d / "ckpt-1"))
  _cut_data_file(d)
  return prefix


def _truncated_checkpoint(d):
  prefix = _cut_checkpoint(d)
  tf2_checkpoint.restore_checked(tf.train.Checkpoint(v=tf.Variable(tf.ones([64, 64]))), prefix)


def _truncated_tf1_read(d):  # what the TF1 (released REALM, ORQA, BERT) loaders read through
  prefix = _cut_checkpoint(d)
  tf2_checkpoint.tensor_getter(tf.train.load_checkpoint(prefix), prefix)(
      "v/.ATTRIBUTES/VARIABLE_VALUE")


def _saved_retriever(d, vocab_size=30):
  retriever = configs.build_retriever(configs.RetrieverConfig(
      encoder=configs.EncoderConfig.tiny(vocab_size=vocab_size), projection_size=8))
  retriever.build()
  return save_model(retriever, str(d / "retriever"))


def _truncated_saved_retriever(d):
  directory = _saved_retriever(d)
  _cut_data_file(d / "retriever" / "weights")
  load_model(directory)


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


def _experiment(d, name, **settings):
  """Trains experiment `name` with `settings` ({dotted key: value}) over the tiny world in d."""
  directory, vocab = tiny_world.write_pipeline_and_vocab(d / "world")
  run_experiment(overrides.override(registry.get(name), {
      "trainer.model_dir": str(d / "run"), "task.vocab_file": str(vocab),
      "task.corpus": str(directory), "task.init.bert_weights": "", **settings}))


def _edited_index_manifest(d, field, value):
  index = BruteForceIndex(np.ones([3, 8], np.float32))
  embeddings = embedding_file.create(str(d / embedding_file.EMBEDDING_FILE), 3, 8, "float32")
  embeddings.flush()
  index_publisher.write_index(index, str(d), embedding_file.metadata(
      str(d / embedding_file.EMBEDDING_FILE), "float32"))
  manifest = json.loads((d / "manifest.json").read_text())
  (manifest["builder"] if field.startswith("embedding") else manifest)[field] = value
  (d / "manifest.json").write_text(json.dumps(manifest))
  _, metadata = index_publisher.read_index(str(d))  # what DocIndex.load reads, in this order
  embedding_file.open_in(str(d), metadata, 3, 8)


def _model_json_with_unknown_key(d):
  ModelInfo(tiny_world.model_config(), "corpus", "fp", "index/step-0", "doc_embedder").write(
      str(d))
  values = json.loads((d / "model.json").read_text())
  (d / "model.json").write_text(json.dumps(dict(values, num_hops=2)))
  ModelInfo.read(str(d))


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
    "unknown_beam_runner": (lambda d: beam_runner.pipeline_options("", ["--runner=NopeRunner"]),
                            "--runner=NopeRunner: unknown Beam runner. Pass DirectRunner"),
    "missing_vocabulary": (lambda d: WordpieceTokenizer.from_vocab_file(str(d / "vocab.txt")),
                           "vocab.txt: no such vocabulary file. Pass the path"),
    "index_root_is_a_file": (lambda d: build_index_lib.build_index(
        str(d), str(d), _file(d / "index", b"x"), kind="brute_force"),
                             "index: is a file, not a directory (--index_root)"),
    "index_version_leaving_the_root": (lambda d: build_index_lib.build_index(
        str(d), str(d), str(d / "index"), kind="brute_force", version="../x"),
                                       "--version='../x': invalid index version: not the name of "
                                       "one directory in the index root"),
    "absolute_index_version": (lambda d: build_index_lib.build_index(
        str(d), str(d), str(d / "index"), kind="brute_force", version="/abs/x"),
                               "--version='/abs/x': invalid index version"),
    "ict_of_zero_steps": (lambda d: _experiment(d, "ict", **{"trainer.num_steps": 0}),
                          "--num_steps=0: the ict experiment needs at least 1 training step"),
    "ict_batch_over_the_corpus": (lambda d: _experiment(d, "ict", **{"trainer.batch_size": 64}),
                                  "world: ICT needs a batch of --batch_size=64 blocks of two or "
                                  "more sentences, and the corpus has 16. Pass --batch_size=16"),
    "more_candidates_than_blocks": (lambda d: _experiment(d, "pretrain", **{
        "task.examples_dir": str(d / "world"), "task.num_candidates": 20}),
                                    "--num_candidates=20: needs 20 blocks retrieved per query, "
                                    "and the corpus"),
    "two_sources_of_one_tower": (lambda d: _experiment(d, "open_qa", **{
        "task.init.checkpoint": "ckpt", "task.init.orqa": "orqa", "task.train_data": "q"}),
                                 "--init_checkpoint=ckpt, --init_orqa=orqa: 2 sources of the "
                                 "retriever's initial weights. Pass one of them"),
    "plot_without_retrieval_utility": (lambda d: plots.plot_retrieval_utility(
        {"ict": _file(d / "metrics.jsonl", b'{"step": 1, "loss": 2.0}\n')}, str(d / "ru.png")),
                                       "metrics.jsonl: no 'retrieval_utility' records"),
    "evaluate_on_unknown_pyserini_set": (lambda d: datasets.dataset_of("pyserini:nope", "nq"),
                                         "pyserini:nope: unknown pyserini question set"),
    "truncated_tf1_checkpoint": (_truncated_tf1_read, "ckpt-1: truncated or damaged checkpoint"),
    "truncated_saved_tower": (_truncated_saved_retriever, "retriever/weights/model: truncated "
                              "or damaged checkpoint (Read less bytes than requested)"),
    "saved_tower_of_another_vocabulary": (lambda d: load_model(
        _saved_retriever(d), vocab_size=25, vocab_file="vocab.txt"),
                                          "retriever: a retriever of a 30-wordpiece vocabulary "
                                          "(its embedding table), but vocab.txt has 25"),
    "edited_manifest_num_docs": (lambda d: _edited_index_manifest(d, "num_docs", 2),
                                 "manifest.json: MIPS index is corrupted: num_docs is 2, but "
                                 "embeddings.npy holds 3 rows"),
    "edited_manifest_storage_dtype": (lambda d: _edited_index_manifest(
        d, embedding_file.STORAGE_KEY, "bfloat16"), "manifest.json: MIPS index is corrupted: "
                                      "embedding_storage_dtype is 'bfloat16', but "
                                      "block_embeddings.npy holds float32 values"),
    "unknown_model_json_key": (_model_json_with_unknown_key, "model.json: not a model.json of "
                               "this version (TypeError: ModelInfo.__init__() got an "
                               "unexpected keyword argument 'num_hops')"),
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


# module -> (its flags, given tmp_path d; its last line on stderr)
BINARY_CASES = {
    "realm_tf.plot_ru": (lambda d: ["--run=no_label", f"--output={d / 'ru.png'}"],
                         "realm-plot-ru: --run must be label:path, got 'no_label'"),
    "realm_tf.evaluate": (lambda d: ["--model_dir=m", "--data=q.jsonl", "--recall_ks=5,a"],
                          "realm-evaluate: flag --recall_ks=['5', 'a']: --recall_ks must be "
                          "positive integers, e.g. 1,5,20,100. Pass --helpshort to see the flags."),
    "realm_tf.export_hub": (lambda d: ["--model_dir=m", f"--export_dir={_file(d / 'hub', b'x')}"],
                            "realm-export-hub: {d}/hub: is a file, not a directory "
                            "(--export_dir). Pass a directory."),
}


@pytest.mark.parametrize("module", sorted(BINARY_CASES))
def test_a_flag_check_inside_main_is_one_line(module, tmp_path):
  flags, last = BINARY_CASES[module]
  result = subprocess.run([sys.executable, "-m", module, *flags(tmp_path)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
  assert result.returncode == errors.EXIT_BAD_INPUT, result.stderr
  assert "Traceback" not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == last.format(d=tmp_path)
