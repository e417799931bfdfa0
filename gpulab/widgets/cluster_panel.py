"""Where a notebook's engines run, said in a banner, with the emulated cluster's link rate and placement.

    engines, panel = notebook_engines(4, nodes=2, link="1gbit", placement="block")
    panel                   # "4 engines on an emulated cluster: 2 nodes x 2 ranks, block placement, 1gbit links"
    panel.follow(runner)    # a placement change restarts the engines: the runner gets the new ones

With ``nodes`` the engines go to an emulated cluster (network namespaces on this
machine, see gpulab.emulated); where the machine cannot host one (no root and no
user namespaces), they start on the single machine and the banner says so and why.
The link rate changes on the running cluster; a new placement needs new engines.
"""

from __future__ import annotations

import html

import ipywidgets as W

LINKS = ("100mbit", "200mbit", "1gbit", "10gbit", "unlimited")


def notebook_engines(n: int, *, nodes: int | None = 2, link: str = "1gbit", placement: str = "block",
                     start=None):
    """(engines, ClusterPanel): on an emulated cluster of ``nodes`` nodes where possible, else on this machine."""
    from gpulab.emulated import ClusterUnavailable

    if start is None:
        from gpulab.cluster import start_engines as start
    if not nodes:
        engines = start(n)
        return engines, ClusterPanel(engines, n, None, link, placement, start, why=None)
    try:
        engines, why = start(n, nodes=nodes, link=link, placement=placement), None
    except ClusterUnavailable as e:
        engines, why = start(n), str(e).splitlines()[0]
    return engines, ClusterPanel(engines, n, nodes, link, placement, start, why)


class ClusterPanel(W.VBox):
    """The banner, and on an emulated cluster the link-rate and placement controls."""

    def __init__(self, engines, n: int, nodes: int | None, link: str, placement: str, start, why: str | None):
        self.engines, self.n, self.nodes, self.start, self.why = engines, n, nodes, start, why
        self._followers = []
        self.banner = W.HTML()
        self.link = W.Dropdown(options=LINKS, value=link if link in LINKS else "1gbit", description="link")
        self.placement = W.Dropdown(options=("block", "round-robin"), value=placement, description="placement")
        self.restart_button = W.Button(description="restart engines", icon="refresh",
                                       tooltip="a new placement needs new engines (a few seconds)")
        self.link.observe(lambda change: self.set_link(change["new"]), names="value")
        self.restart_button.on_click(lambda _: self.restart())
        emulated = self.emulated is not None
        for control in (self.link, self.placement, self.restart_button):
            control.disabled = not emulated
        self._say()
        controls = [W.HBox([self.link, self.placement, self.restart_button])] if emulated else []
        super().__init__([self.banner] + controls)

    @property
    def emulated(self):
        return getattr(self.engines, "emulated", None)

    def describe(self) -> str:
        cluster = self.emulated
        if cluster is None:
            reason = f" (no emulated cluster: {self.why})" if self.why else ""
            return f"{self.n} engines on this single machine{reason}: every link is shared memory"
        per_node = -(-self.n // cluster.nodes)
        ranks = f"{per_node} rank{'s' * (per_node != 1)}"
        cpus = (getattr(cluster, "state", None) or {}).get("cpus")
        cores = ("each node on its own cores (" + ", ".join(f"node {k}: {','.join(map(str, c))}"
                                                         for k, c in enumerate(cpus, start=1)) + ")"
                 if cpus else "the nodes sharing every core of this machine")
        return (f"{self.n} engines on an emulated cluster: {cluster.nodes} nodes x {ranks}, "
                f"{cluster.placement} placement, {cluster.link or 'unlimited'} links between nodes "
                f"(TCP; shared memory inside a node), {cores}")

    def _say(self) -> None:
        self.banner.value = f"<b>Running on:</b> {html.escape(self.describe())}"

    def follow(self, runner) -> None:
        """Give ``runner`` (anything with an ``engines`` attribute) the new engines after a restart."""
        self._followers.append(runner)

    def set_link(self, link: str) -> None:
        """The rate of every node's link, changed on the running cluster."""
        self.emulated.set_link(link)
        self._say()

    def restart(self) -> None:
        """New engines on a new cluster with the chosen placement and link (the old ones are stopped)."""
        self.banner.value = "<b>Restarting the engines...</b>"
        self.engines.stop()
        self.engines = self.start(self.n, nodes=self.nodes, link=self.link.value, placement=self.placement.value)
        for runner in self._followers:
            runner.engines = self.engines
        self._say()
