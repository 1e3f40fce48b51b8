"""The job registry: one typed JobSpec per streaming job, loaded from YAML and validated."""
