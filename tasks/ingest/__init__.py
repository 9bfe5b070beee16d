"""ingest's stages: read a dataset into validated rows and rejects, split paragraphs into sentences, clean."""
