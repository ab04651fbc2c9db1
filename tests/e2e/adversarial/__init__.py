"""Adversarial scenarios on the real local Slurm cluster: what real clusters and real users do."""
