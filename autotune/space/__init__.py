"""The search space: schema, space files, init."""
