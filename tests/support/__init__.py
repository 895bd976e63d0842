"""What the tests share: one poll helper, the pipeline's stages and topic readers."""
