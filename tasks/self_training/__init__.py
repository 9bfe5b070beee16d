"""self_training's stages (thesis ch. 6): tokenize, align, word uncertainty, uncertainty-based sampling."""
