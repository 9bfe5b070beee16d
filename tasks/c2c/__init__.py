"""C2C-GenDA's stages: delexicalisation, dispersed cluster pairing, generation per fold, diversity (MED)."""
