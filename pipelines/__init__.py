"""REALM's corpus pipelines on Apache Beam (locally, or on Dask, Dataflow, Flink, Spark).

1. `wikipedia_to_blocks`: MediaWiki XML dump (or JSONL) -> evidence blocks.
2. `pretraining_examples`: blocks -> salient-span (or random-mask ablation) examples.
3. `build_index`: blocks + doc-embedder export -> embeddings -> published MIPS index.

Each binary is thin over its `_lib` module (`run_pipeline(pipeline, config)`); the shared
pieces are `dump_reader`, `wikitext_cleaner`, `block_packer`, `salient_span_tagger`,
`document_sources`, `block_records`, `dead_letter`, `beam_runner`, `dask_runner` (sentences
are split by `realm_tf.tokenization.sentence_splitter`, which ICT shares).
"""
