"""The one retrieval layer: the corpus, block embeddings, fingerprints and index refreshers."""
