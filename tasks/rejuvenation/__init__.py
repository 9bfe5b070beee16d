"""rejuvenation's stages (thesis ch. 5): the inactive pairs, and new targets for their sources."""
