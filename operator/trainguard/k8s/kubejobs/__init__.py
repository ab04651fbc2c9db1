"""The Kubernetes workload scheduler adapter: JobSets and PyTorchJobs seen as ``schedulers.base.Scheduler``.

Lives in the k8s shell (it needs Kubernetes libraries); the operator builds it for
``--scheduler kubernetes`` and hands it to the engine, which never imports it. See docs/kubernetes-workloads.md.
"""
