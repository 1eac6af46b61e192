"""The serving seam and engine processes."""
