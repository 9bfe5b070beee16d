"""paraphrase's stages (PCC, Alg. 2): candidates with bottom-k, their scores, the curriculum of difficulty levels."""
