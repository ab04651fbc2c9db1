"""End to end on SchedMD's slurm-operator v1.0.1 and Slurm 26.05 (``hack/local-kube.sh up --cluster --slinky``)."""
