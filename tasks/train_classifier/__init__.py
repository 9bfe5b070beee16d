"""train_classifier's stages (PCC Alg. 1): a classifier trained on the curriculum sampler, and its scores."""
