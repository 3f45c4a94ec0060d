"""`kime serve --engine ray`'s parts that need no cluster: the sizing and its refusals, the
settings that mean something only on Ray, `/metrics` summed over replicas
(`metrics.labelled_union`), the metrics board and the health probe on a real engine."""
from __future__ import annotations

import warnings
from collections import Counter
from typing import Dict, List, Tuple

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("ray.serve")

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

import kime
from kime.serve import ConfigError, Settings, load_settings
from kime.serve import on_ray
from kime.serve.metrics import Metrics, labelled_union
from kime.serve.on_ray import MetricsBoard, Sizing, probe
from kime.serve.settings import check_engine

from .. import paths


def sizing(**values) -> Sizing:
    return Sizing.of(Settings(engine="ray", **values))


def test_the_sizing_the_settings_ask_for():
    assert sizing() == Sizing(replicas=1, threads=1)
    assert sizing(replicas=3, threads_per_replica=2) == Sizing(replicas=3, threads=2)
    assert sizing(threads=4) == Sizing(replicas=1, threads=4)  # --threads means the same
    assert sizing(threads=2, threads_per_replica=2).threads == 2
    assert sizing(autoscale="2:5") == Sizing(replicas=2, threads=1, autoscale=(2, 5))
    assert sizing(autoscale="0:3") == Sizing(replicas=1, threads=1, autoscale=(0, 3))
    assert sizing(autoscale="1:4", replicas=3).replicas == 3
    with pytest.raises(ConfigError, match="--threads-per-replica 2 and --threads 3 disagree"):
        sizing(threads=3, threads_per_replica=2)
    with pytest.raises(ConfigError, match="--replicas 5 is outside --autoscale 1:4"):
        sizing(autoscale="1:4", replicas=5)


@pytest.mark.parametrize("bad", ["4", "3:1", "a:b", "1:0", ":", "-1:2", "1:2:3"])
def test_a_bad_autoscale_is_refused_by_name(bad):
    with pytest.raises(ConfigError, match="invalid flag value %r for autoscale: MIN:MAX" % bad):
        load_settings({"engine": "ray", "autoscale": bad}, environ={})


def test_the_engine_is_local_or_ray_and_rays_settings_need_ray():
    assert load_settings({"engine": " Ray "}, environ={}).engine == "ray"
    with pytest.raises(ConfigError, match="invalid flag value 'k8s' for engine: one of local, ray"):
        load_settings({"engine": "k8s"}, environ={})
    local = load_settings({"replicas": "2", "autoscale": "1:3", "ray_address": "auto"},
                          environ={"KIME_THREADS_PER_REPLICA": "2"})
    with pytest.raises(ConfigError) as info:
        check_engine(local)
    assert str(info.value) == ("--replicas, --threads-per-replica, --autoscale, --ray-address "
                               "need --engine ray")
    check_engine(load_settings({"engine": "ray", "replicas": "2"}, environ={}))
    check_engine(load_settings({}, environ={}))


@settings(max_examples=200, deadline=None)
@given(nodes=st.lists(st.integers(0, 16), max_size=6), threads=st.integers(1, 8),
       replicas=st.integers(1, 20))
def test_a_size_fits_exactly_when_every_replica_has_a_node_with_its_cpus(nodes, threads,
                                                                          replicas):
    # fits: place replicas one by one, each on a node with `threads` CPUs still free
    free = list(nodes)
    placed = 0
    for _ in range(replicas):
        spot = next((i for i, cpus in enumerate(free) if cpus >= threads), None)
        if spot is None:
            break
        free[spot] -= threads
        placed += 1
    size = Sizing(replicas=replicas, threads=threads)
    listed = [("10.0.0.%d" % i, float(c)) for i, c in enumerate(nodes)]
    if placed == replicas:
        size.check(listed)
    else:
        with pytest.raises(ConfigError) as info:
            size.check(listed)
        message = str(info.value)
        assert message.startswith("%d replica(s) x %d thread(s) do not fit this Ray cluster"
                                  % (replicas, threads))
        assert "hold %d." % placed in message
        assert all("10.0.0.%d %d CPU" % (i, c) in message for i, c in enumerate(nodes))


def test_autoscaling_is_checked_at_its_most_and_configured_for_serve():
    size = sizing(autoscale="1:3", threads_per_replica=2, max_queue=64)
    with pytest.raises(ConfigError, match="3 replica"):
        size.check([("a", 2.0), ("b", 3.0), ("c", 1.0)])  # holds 2 of 2 CPUs
    size.check([("a", 4.0), ("b", 2.0)])
    opts = size.options(Settings(max_queue=64, graceful_shutdown=7))
    assert opts["ray_actor_options"] == {"num_cpus": 2}
    assert opts["max_ongoing_requests"] == 64 and opts["max_queued_requests"] == 64
    assert opts["graceful_shutdown_timeout_s"] == 7
    assert opts["autoscaling_config"]["min_replicas"] == 1
    assert opts["autoscaling_config"]["max_replicas"] == 3
    assert "num_replicas" not in opts
    fixed = sizing(replicas=2).options(Settings(max_queue=0))
    assert fixed["num_replicas"] == 2 and fixed["max_queued_requests"] == -1
    assert fixed["max_ongoing_requests"] > 5  # never Serve's default, which starves the scheduler


def _samples(text: bytes) -> List[Tuple[str, Dict[str, str], float]]:
    return [(s.name, s.labels, s.value)
            for f in text_string_to_metric_families(text.decode()) for s in f.samples]


def _key(sample: Tuple[str, Dict[str, str], float]) -> str:
    return repr((sample[0], sorted(sample[1].items()), sample[2]))


@pytest.fixture(scope="module")
def engine():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield kime.Kime(str(paths.TINY), threads=1)


@settings(max_examples=25, deadline=None)
@given(traffic=st.lists(st.lists(st.sampled_from([200, 422, 503]), max_size=8), min_size=1,
                        max_size=4))
def test_the_union_of_replicas_metrics_labels_each_and_sums_to_the_traffic(engine, traffic):
    sheets = []
    for i, statuses in enumerate(traffic):
        metrics = Metrics(lambda: [(None, engine)])
        for status in statuses:
            metrics.observe("POST", "/v1/systemone", status, 0.02)
        sheets.append(("r%d" % i, metrics.render()))
    union = _samples(labelled_union(sheets))
    # each replica's own samples, labelled with its name, and nothing else
    want = [(name, dict(labels, replica=r), value)
            for r, text in sheets for name, labels, value in _samples(text)]
    assert sorted(map(_key, union)) == sorted(map(_key, want))
    counted = Counter()
    for name, labels, value in union:
        if name == "kime_http_requests_total":
            counted[labels["status"]] += value
    assert counted == Counter(str(s) for statuses in traffic for s in statuses)


def test_the_board_keeps_each_replicas_latest_sheet_until_it_goes_stale(monkeypatch):
    board = MetricsBoard()
    board.post("b", b"1")
    board.post("a", b"2")
    board.post("b", b"3")
    assert board.read() == [("a", b"2"), ("b", b"3")]
    board.leave("a")
    assert board.read() == [("b", b"3")]
    monkeypatch.setattr(on_ray, "STALE_S", -1.0)  # every sheet is older than that
    assert board.read() == []


def test_the_health_probe_passes_a_working_engine_and_fails_a_closed_one():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mine = kime.Kime(str(paths.TINY), threads=1)
    probe([(None, mine), ("english", mine)])
    mine.close()
    with pytest.raises(RuntimeError, match="the engine of english cannot answer: the model was "
                                           "closed"):
        probe([("english", mine)])
    with pytest.raises(RuntimeError, match="no checkpoint is loaded"):
        probe([])
