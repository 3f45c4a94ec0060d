"""Ray clusters of the tests' own, on loopback only.

`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` keeps Ray from rewriting 127.0.0.1 to the machine's
network address (`resolve_ip_for_localhost`), and every node, driver and `kime serve --engine
ray` gets `node_ip_address="127.0.0.1"` or that variable. Each test module starts its own
cluster (`address="local"` or a `Cluster`) and never attaches to one already running here."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Dict, Iterator

LOOPBACK = "127.0.0.1"
ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
"""What every Ray process of a test runs with: set here, for this process and its children,
before Ray is imported (it reads the first at import). tests/conftest.py imports this module."""
os.environ.update(ENV)


def environ() -> Dict[str, str]:
    """An environment for a subprocess that joins a test cluster: this one, with `ENV`, and no
    RAY_ADDRESS pointing elsewhere."""
    env = dict(os.environ, **ENV)
    env.pop("RAY_ADDRESS", None)
    return env


@contextmanager
def local_ray(num_cpus: int) -> Iterator[None]:
    """`ray.init` of a new single-node Ray of `num_cpus` CPUs on loopback, this process its
    driver; shut down after."""
    import ray

    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
             _node_ip_address=LOOPBACK, logging_level="WARNING")
    try:
        yield
    finally:
        ray.shutdown()


@contextmanager
def loopback_cluster(workers: int = 2, cpus: int = 1) -> Iterator[str]:
    """A `ray.cluster_utils.Cluster` on loopback: a head with no CPUs (it places nothing) and
    `workers` worker nodes of `cpus` CPUs each; this process is its driver. Gives the address."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "node_ip_address": LOOPBACK, "include_dashboard": False})
    try:
        for _ in range(workers):
            cluster.add_node(num_cpus=cpus, node_ip_address=LOOPBACK)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, _node_ip_address=LOOPBACK, logging_level="WARNING")
        try:
            yield cluster.address
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()
