"""Training programs the trainer tests run: small, deterministic, written as a user would write them."""
