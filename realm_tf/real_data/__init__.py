"""Zero-shot retrieval on real data: Wikipedia lead extracts and NQ-open dev questions.

Modules: `corpus` (all lead extracts as blocks, prepared once by the Beam pipeline),
`questions` (the NQ-open dev questions the corpus answers, train/dev by hash),
`sentence_minilm` (all-MiniLM-L6-v2 as sentence-transformers runs it, in torch),
`embedding_cache` (block embeddings kept between runs) and `fact_verification` (true and false
claims from the questions, for `bench/classification.py`); the BM25 baseline and recall@k are
`realm_tf.evaluation`'s (`bm25`, `retrieval_recall`). `bench/real_data.py` runs them.
"""
