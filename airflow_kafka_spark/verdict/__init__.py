"""The pre-deploy verdict: findings about checkpoint/Kafka alignment, and the validate flow."""
