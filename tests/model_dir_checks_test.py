"""Checked model directories: model.json and vocab.txt are verified against the checkpoint,
every path of model.json stays inside the model directory, a moved directory still answers,
and answering over the model's own corpus loads no SavedModel."""
import json
import os
import shutil

import pytest

from realm_tf import errors
from realm_tf.qa import ask_lib
from realm_tf import tiny_world
from realm_tf.qa.model import QAModel
from realm_tf.qa.model import find_model_dir

QUESTION = tiny_world.QUESTIONS[-1][0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  return tiny_world.write_open_qa(str(tmp_path_factory.mktemp("world")))


@pytest.fixture(scope="module")
def model_dir(world, tmp_path_factory):
  """The (untrained) tiny model as a QA model directory (0 fine-tuning steps: root and best/)."""
  return tiny_world.write_untrained_model(world, str(tmp_path_factory.mktemp("model") / "model"))


@pytest.fixture(scope="module")
def answer(model_dir):
  return ask_lib.Asker(model_dir).ask(QUESTION)


def _copy(model_dir, tmp_path):
  copy = str(tmp_path / "copy")
  shutil.copytree(model_dir, copy)
  return copy, find_model_dir(copy)


def _edit_info(directory, edit):
  path = os.path.join(directory, "model.json")
  with open(path) as f:
    info = json.load(f)
  edit(info)
  with open(path, "w") as f:
    json.dump(info, f)


def _set_layers(n):
  return lambda info: info["model"]["encoder"].update(num_layers=n)


def _set(key, value):
  return lambda info: info.update({key: value})


# case -> (edit of the loaded directory (root, best), message after "<dir>/")
CASES = {
    "num_layers_2_to_1": (lambda root, best: _edit_info(best, _set_layers(1)),
                          "best/model.json: encoder.num_layers is 1, but the checkpoint "),
    "num_layers_2_to_3": (lambda root, best: _edit_info(best, _set_layers(3)),
                          "best/model.json: encoder.num_layers is 3, but the checkpoint "),
    "span_head_size": (lambda root, best: _edit_info(best, lambda info: info["model"].update(
        span_hidden_size=7)), "best/model.json: the model it describes (136 variables) does "
                              "not fit the checkpoint "),
    "vocab_cut_in_half": (lambda root, best: _halve(os.path.join(root, "vocab.txt")),
                          "vocab.txt: 23 wordpieces, but the embedding table of the checkpoint "),
    "vocab_edited": (lambda root, best: _swap_lines(os.path.join(root, "vocab.txt")),
                     "vocab.txt: not the vocabulary the model was fine-tuned with"),
    "vocab_file_absolute": (lambda root, best: _edit_info(best, _set("vocab_file", "/etc/passwd")),
                            "best/model.json: vocab_file '/etc/passwd' is not a relative path "
                            "inside the model directory"),
    "vocab_file_dotdot": (lambda root, best: _edit_info(best, _set(
        "vocab_file", "../../../../../../../../etc/passwd")), "best/model.json: vocab_file "
                          "'../../../../../../../../etc/passwd' is not a relative path inside"),
    "corpus_absolute": (lambda root, best: _edit_info(best, _set("corpus", "/etc/hostname")),
                        "best/model.json: corpus '/etc/hostname' is not a relative path "),
    "doc_embedder_outside": (lambda root, best: _edit_info(best, _set("doc_embedder", "../..")),
                             "best/model.json: doc_embedder '../..' is not a relative path "),
    "doc_embedder_missing": (lambda root, best: _remove_named(best, "doc_embedder"),
                             "doc_embedder/step-"),
    "corpus_missing": (lambda root, best: _remove_named(best, "corpus"), "corpus: "
                       "missing, though "),
}


def _remove_named(directory, key):
  with open(os.path.join(directory, "model.json")) as f:
    path = os.path.normpath(os.path.join(directory, json.load(f)[key]))
  if os.path.isdir(path):
    shutil.rmtree(path)
  else:
    os.remove(path)


def _halve(path):
  with open(path) as f:
    lines = f.read().splitlines()
  with open(path, "w") as f:
    f.write("\n".join(lines[:len(lines) // 2]) + "\n")


def _swap_lines(path):
  with open(path) as f:
    lines = f.read().splitlines()
  lines[-1], lines[-2] = lines[-2], lines[-1]
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("case", sorted(CASES))
def test_edited_model_directory_is_rejected_naming_the_file(model_dir, tmp_path, case):
  edit, message = CASES[case]
  root, best = _copy(model_dir, tmp_path)
  edit(root, best)
  with pytest.raises(errors.InputError) as error:
    ask_lib.Asker(root)
  text = str(error.value)
  assert "\n" not in text
  assert text.startswith(f"{root}/{message}"), text


def test_paths_in_model_json_are_relative(model_dir):
  for directory in (model_dir, os.path.join(model_dir, "best")):
    with open(os.path.join(directory, "model.json")) as f:
      info = json.load(f)
    for key in ("vocab_file", "corpus", "doc_index", "doc_embedder"):
      assert not os.path.isabs(info[key]), (directory, key, info[key])


def test_moved_model_directory_answers_without_loading_a_saved_model(model_dir, answer,
                                                                     tmp_path):
  moved = str(tmp_path / "elsewhere" / "model")
  root, _ = _copy(model_dir, tmp_path)
  shutil.move(root, moved)
  asker = ask_lib.Asker(moved)
  assert asker.ask(QUESTION).answer == answer.answer
  assert asker.model._doc_embedder is None  # pylint: disable=protected-access


def test_explicit_corpus_may_be_elsewhere(model_dir, world, answer):
  asker = ask_lib.Asker(model_dir, corpus=world.corpus)
  assert asker.ask(QUESTION).answer == answer.answer
  assert QAModel.load(find_model_dir(model_dir)).corpus.fingerprint == (
      asker.model.corpus.fingerprint)
