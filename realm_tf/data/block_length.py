"""`BLOCK_LENGTH`: REALM's block length, written once.

A block is `[CLS] title [SEP] body [SEP]` in at most 288 wordpieces, the paper's and the
released corpus's. It is the default of the corpus pipeline (`pipelines.block_packer`), of
`presets.ModelConfig.block_length` (the registered experiments' lengths) and of every library
that packs, embeds or reads blocks; a run's own length comes from its config. No TensorFlow:
the pipelines' `--help` reads it.
"""
BLOCK_LENGTH = 288
