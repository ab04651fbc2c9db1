"""Data package: the versioned pattern catalog (``patterns.yaml``)."""
