"""Evidence about a finished study."""
