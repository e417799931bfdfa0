"""The banner and controls that say where a notebook's engines run, with fake engines and a fake cluster."""

from gpulab.emulated import ClusterUnavailable
from gpulab.widgets import notebook_engines


class FakeCluster:
    def __init__(self, nodes, link, placement):
        self.nodes, self.link, self.placement, self.links = nodes, link, placement, []
        self.state = {"cpus": [[0], [1]] if placement == "block" else None}  # gpulab.emulated.cluster.node_cpus

    def set_link(self, link):
        self.links.append(link)
        self.link = None if link == "unlimited" else link


class FakeEngines:
    def __init__(self, n, cluster=None):
        self.n, self.emulated, self.stopped = n, cluster, False

    def stop(self):
        self.stopped = True


def fake_start(refuse=False):
    started = []

    def start(n, nodes=None, link=None, placement="block"):
        if nodes and refuse:
            raise ClusterUnavailable("cannot create network namespaces: Operation not permitted\nmore detail")
        started.append(FakeEngines(n, FakeCluster(nodes, link, placement) if nodes else None))
        return started[-1]
    return start, started


def test_emulated_banner_link_change_and_placement_restart():
    start, started = fake_start()
    engines, panel = notebook_engines(4, nodes=2, link="1gbit", placement="block", start=start)
    assert engines is started[0]
    assert "4 engines on an emulated cluster: 2 nodes x 2 ranks, block placement, 1gbit links" in panel.banner.value
    assert "each node on its own cores (node 1: 0, node 2: 1)" in panel.banner.value
    panel.link.value = "100mbit"
    assert engines.emulated.links == ["100mbit"] and "100mbit links" in panel.banner.value

    class Runner:
        pass
    runner = Runner()
    runner.engines = engines
    panel.follow(runner)
    panel.placement.value = "round-robin"
    panel.restart_button.click()
    assert engines.stopped and runner.engines is started[1] is panel.engines
    assert (started[1].emulated.placement, started[1].emulated.link) == ("round-robin", "100mbit")
    assert "round-robin placement, 100mbit links" in panel.banner.value
    assert "the nodes sharing every core of this machine" in panel.banner.value


def test_where_no_cluster_can_be_made_the_banner_says_single_machine_and_why():
    start, started = fake_start(refuse=True)
    engines, panel = notebook_engines(4, nodes=2, start=start)
    assert engines is started[0] and engines.emulated is None
    assert ("4 engines on this single machine (no emulated cluster: cannot create network namespaces: "
            "Operation not permitted)") in panel.banner.value
    assert panel.link.disabled and panel.placement.disabled and panel.restart_button.disabled
    assert len(panel.children) == 1  # the banner only


def test_without_nodes_the_engines_start_on_this_machine():
    start, started = fake_start()
    engines, panel = notebook_engines(2, nodes=None, start=start)
    assert engines.emulated is None and "2 engines on this single machine: every link" in panel.banner.value
