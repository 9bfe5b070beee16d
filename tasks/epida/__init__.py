"""EPiDA's stages: candidates from EDA, CWE or back-translation, the classifier's feedback, SEAS selection,
training with Eq. 14's loss."""
