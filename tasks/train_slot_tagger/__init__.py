"""train_slot_tagger's stages: a training set per arm, predictions and span F1 on a held-out set."""
