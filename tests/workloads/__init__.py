"""Real training workloads (``train.py``) and the sbatch scripts that run them (``jobs.py``)."""
