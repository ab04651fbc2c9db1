"""Where doctor's ``kubernetes.rbac`` asks each permission (``kube_probe.Target``): the operator's
environment read as ``OperatorSettings`` reads it, every row of ``k8s.rbac`` asked once per place."""

from __future__ import annotations

from trainguard.k8s import kube_probe, rbac


def test_listed_namespaces_and_the_lease() -> None:
    target = kube_probe.Target.from_env({"TRAINGUARD_NAMESPACE": "team-a, team-b", "TRAINGUARD_PEERING": "tg",
                                         "POD_NAMESPACE": "ops"})
    assert target == kube_probe.Target(("team-a", "team-b"), "team-a", ("core", "kubernetes", "peering"))
    asks = {(g, r, v, ns) for g, r, v, ns, _f in target.asks()}
    assert ("jobset.x-k8s.io", "jobsets", "patch", "team-b") in asks
    assert ("", "nodes", "patch", None) in asks  # cluster-scoped: cluster-wide
    assert ("coordination.k8s.io", "leases", "create", "team-a") in asks  # workload namespace
    assert not any(r == "customresourcedefinitions" for _g, r, _v, _n in asks)
    # every permission of the features, in every place its scope names, and nothing else
    places = {"cluster": [None], "served": ["team-a", "team-b"], "workload": ["team-a"]}
    wanted = {(group, resource, verb, place) for scope, group, resource, verb in rbac.granted(target.features)
              for place in places[scope]}
    assert asks == wanted


def test_every_namespace_and_the_defaults() -> None:
    every = kube_probe.Target.from_env({"TRAINGUARD_ALL_NAMESPACES": "true", "POD_NAMESPACE": "ops"})
    assert (every.served, every.workload, every.features) == ((), "ops", ("core", "kubernetes", "allNamespaces"))
    assert {ns for _g, _r, _v, ns, _f in every.asks()} == {None, "ops"}
    alone = kube_probe.Target.from_env({"POD_NAMESPACE": "ops", "TRAINGUARD_WORKLOAD_NAMESPACE": "work"})
    assert (alone.served, alone.workload) == (("ops",), "work")
