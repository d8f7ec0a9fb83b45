"""SavedModel exports of the REALM towers: the doc embedder the index builder runs
(`doc_embedder`), and the TF Hub modules of a fine-tuned QA model (`query_embedder`,
`reader`, `realm_qa`, written together by `export_hub_lib`)."""
