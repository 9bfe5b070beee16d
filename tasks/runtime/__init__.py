"""The stage runtime: a stage's declaration and how it runs per shard (`Stage`), and the progress of long stages."""
