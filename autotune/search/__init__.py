"""The search: a study, its workers and one trial."""
