"""On-disk formats shared by the pipelines, the trainers and the index builder."""
