"""Where a streaming job runs (YARN, Kubernetes, a local process), reached without a JVM."""
