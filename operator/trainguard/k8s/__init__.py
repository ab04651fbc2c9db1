"""The kopf operator shell (issue: Kubernetes operator)."""
