"""What the product remembers beside a checkpoint that Spark does not: the lifecycle record."""
