"""The initial-weights flags of the training binaries, onto `task.init` (`presets.InitConfig`)
and pre-training's saved towers (`task.retriever_dir`, `task.reader_dir`)."""
from absl import flags

from realm_tf.flag_groups.config_flags import ConfigFlags


def define_init_flags(config: ConfigFlags, released_realm: bool = False,
                      saved_towers: bool = False, open_qa: bool = False) -> None:
  """Binds `--init_weights` to `task.init.bert_weights`; `released_realm` adds
  `--init_realm_embedder`, `--init_realm_encoder` and `--init_index`, `saved_towers`
  `--retriever_dir` and `--reader_dir`, `open_qa` `--init_checkpoint`,
  `--init_checkpoint_share_towers` and `--init_orqa`."""
  others = [name for name, given in (
      ("--retriever_dir/--reader_dir", saved_towers), ("--init_checkpoint", open_qa),
      ("--init_orqa", open_qa), ("--init_realm_embedder/--init_realm_encoder", released_realm)) if given]
  config.bind(flags.DEFINE_string(
      "init_weights", None, "BERT weights of "
      f"{'the towers nothing else fills (' + ', '.join(others) + ')' if others else 'the towers'}: "
      "'minilm', HF safetensors, a TF1 BERT ckpt, or 'random' (said in a warning line)."),
              "task.init.bert_weights")
  if released_realm:
    config.bind(flags.DEFINE_string(
        "init_realm_embedder", None, "Released REALM embedder (cc_news_pretrained/embedder/"
        "variables/variables) -> the retriever."), "task.init.realm_embedder")
    config.bind(flags.DEFINE_string(
        "init_realm_encoder", None, "Released REALM knowledge-augmented encoder "
        "(cc_news_pretrained/bert/variables/variables) -> the reader, MLM head included."),
                "task.init.realm_encoder")
    config.bind(flags.DEFINE_string(
        "init_index", None, "Precomputed step-0 embeddings of --corpus by the initial doc tower "
        "(the released block_emb, cc_news_pretrained/embedder/encoded/encoded.ckpt, or a "
        ".npy), checked on sampled blocks instead of embedding every block."),
                "task.init.index")
  if saved_towers:
    config.bind(flags.DEFINE_string("retriever_dir", None, "Saved retriever to start from (ICT "
                                    "output)."), "task.retriever_dir")
    config.bind(flags.DEFINE_string("reader_dir", None, "Saved reader to start from."),
                "task.reader_dir")
  if open_qa:
    config.bind(flags.DEFINE_string(
        "init_checkpoint", None, "TF2 checkpoint tf.train.Checkpoint(retriever=, reader=), or a "
        "realm-pretrain --model_dir (its checkpoints, head and tower sharing), or a "
        "realm-finetune --model_dir (fine-tuning goes on from its last checkpoint)."),
                "task.init.checkpoint")
    config.bind(flags.DEFINE_bool("init_checkpoint_share_towers", None, "Whether "
                                  "--init_checkpoint's retriever shares its towers."),
                "task.init.checkpoint_share_towers")
    config.bind(flags.DEFINE_string("init_orqa", None, "Released ORQA checkpoint."),
                "task.init.orqa")
