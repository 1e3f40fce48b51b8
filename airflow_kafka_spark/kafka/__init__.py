"""What Kafka says: offsets, brokers, topics, groups, record timestamps, secrets redaction."""
