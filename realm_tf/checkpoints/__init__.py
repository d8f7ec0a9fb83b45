"""Loading published weights: REALM/ORQA TF1 checkpoints, Google BERT, HF safetensors.

    load_bert_checkpoint(encoder, "uncased_L-12_H-768_A-12/bert_model.ckpt")
    load_hf_bert(encoder, "all-MiniLM-L6-v2/")
    load_realm_embedder(retriever, "cc_news_pretrained/embedder/variables/variables")
    load_realm_encoder(reader, "cc_news_pretrained/bert/variables/variables")
    load_orqa(retriever, reader, "orqa_nq_model_from_realm/export/best_default/checkpoint")
"""
from realm_tf.checkpoints import variable_maps
from realm_tf.checkpoints.hf_safetensors import read_hf_bert
from realm_tf.checkpoints.tf1_checkpoint import CheckpointMismatchError
from realm_tf.checkpoints.tf1_checkpoint import load_arrays
from realm_tf.checkpoints.tf1_checkpoint import load_tf1_checkpoint
from realm_tf.checkpoints.tf1_checkpoint import tf1_arrays
from realm_tf.checkpoints.tf1_checkpoint import write_tf1_checkpoint


def load_bert_checkpoint(encoder, path: str) -> None:
  """A Google BERT TF1 checkpoint into a BERT encoder (its `cls/` pre-training heads unused)."""
  load_tf1_checkpoint(path, variable_maps.bert_map(encoder), ignore=(r"^cls/",))


def load_hf_bert(encoder, path: str) -> None:
  """HF-layout BERT safetensors (a file or a directory holding `model.safetensors`)."""
  load_arrays(path, read_hf_bert(path), variable_maps.bert_map(encoder))


def load_realm_embedder(retriever, path: str) -> None:
  """REALM's pre-trained embedder into both towers (its unused MLM head is ignored)."""
  load_tf1_checkpoint(path, variable_maps.realm_embedder_map(retriever),
                      ignore=(r"/cls/predictions/",))


def load_realm_encoder(reader, path: str) -> None:
  """REALM's pre-trained knowledge-augmented encoder: BERT + MLM head."""
  load_tf1_checkpoint(path, variable_maps.realm_encoder_map(reader))


def load_orqa(retriever, reader, path: str) -> None:
  """An ORQA checkpoint fine-tuned from REALM: retriever and span reader."""
  load_tf1_checkpoint(path, variable_maps.orqa_map(retriever, reader),
                      ignore=(r"/cls/predictions/",))


__all__ = ["CheckpointMismatchError", "load_arrays", "load_bert_checkpoint", "load_hf_bert",
           "load_orqa", "load_realm_embedder", "load_realm_encoder", "load_tf1_checkpoint",
           "read_hf_bert", "tf1_arrays", "variable_maps", "write_tf1_checkpoint"]
