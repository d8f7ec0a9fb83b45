"""The TF Hub modules of a fine-tuned QA model (`preprocessor`, `query_embedder`, `reader`,
`realm_qa`, written with the doc embedder by `export_hub_lib`) and of a classification run
(`preprocessor`, `query_embedder`, `realm_classifier`). They build on `realm_tf.signatures`
(the doc-embedder export, the Reusable SavedModel base) and import none of the stages (`qa`,
`training`, `demo`, `knowledge_world`, `classification`); the `realm-export-hub` binary loads
the model and calls `export_hub_lib.export_hub` or `export_classifier_hub`."""
