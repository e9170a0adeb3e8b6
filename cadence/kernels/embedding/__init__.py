"""A decode frame's input embedding: its 16 codes' embeddings gathered and summed, the text track added."""
