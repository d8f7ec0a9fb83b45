"""SavedModel signatures the stages share, below them all: the doc-embedder export the index
builder, the trainers' index refresh and the QA index run over every block (`doc_embedder`),
and the Reusable SavedModel base of every TF Hub module (`reusable`). `realm_tf.export` builds
the TF Hub modules of a fine-tuned model on top of them."""
