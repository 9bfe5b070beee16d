"""train_classifier's stages (PCC Alg. 1): the curriculum sampler, training and scoring a classifier."""
