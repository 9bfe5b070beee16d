"""train_nmt's stages: an arm's training data and continued training, paired significance against the baseline."""
