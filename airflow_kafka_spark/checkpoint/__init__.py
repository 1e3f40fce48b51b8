"""What a Spark checkpoint says, read from its files (never written here)."""
