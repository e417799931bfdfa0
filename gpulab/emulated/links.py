"""The emulated cluster's links: rate parsing, and on a running cluster their state, rate and faults.

``Links`` is mixed into ``EmulatedCluster`` (it needs ``on_node``, ``on_switch``, ``pids_on_node``, ``state``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gpulab.emulated.netns import TBF_BURST, TBF_LATENCY, tool

_RATE = re.compile(r"^(\d+(?:\.\d+)?)([kmg]?)bit$")


def parse_link(link: str | None) -> str | None:
    """'1gbit' -> '1gbit'; None, '', 'unlimited', 'none' -> None; anything else -> ValueError."""
    if link is None or str(link).lower() in ("", "unlimited", "none", "inf"):
        return None
    text = str(link).lower()
    if not _RATE.match(text):
        raise ValueError(f"link rate must look like 100mbit, 1gbit, 10gbit or 'unlimited', got {link!r}")
    return text


def link_bytes_per_s(link: str | None) -> float | None:
    """The rate of a link in bytes per second (None for unlimited)."""
    link = parse_link(link)
    if link is None:
        return None
    value, unit = _RATE.match(link).groups()
    return float(value) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[unit] / 8


class Links:
    """Looking at the links of a running cluster, changing their rate, cutting them (faults to test with)."""

    def describe(self) -> str:
        lines = [f"emulated cluster{' ' + self.name if self.name else ''}: {self.nodes} nodes, link "
                 f"{self.link or 'unlimited'}, placement {self.placement}, ranks per node "
                 f"{self.ranks_per_node or 'ranks / nodes'}, TCP {self.state.get('tcp_congestion', '?')}, mode "
                 f"{self.mode}, keeper pid {self.state['pid']}"]
        for k in range(1, self.nodes + 1):
            addr = _run(self.on_node(k, [tool("ip"), "-br", "addr", "show", "dev", "eth0"])).split()
            qdisc = _run(self.on_node(k, [tool("tc"), "qdisc", "show", "dev", "eth0"])).strip()
            pids = self.pids_on_node(k)
            lines.append(f"  node {k}: {' '.join(addr[2:3])} eth0 {addr[1] if len(addr) > 1 else '?'}; "
                         f"{qdisc.split(' root ')[0].replace('qdisc ', '') or 'no qdisc'} "
                         f"{_rate_of(qdisc)}; {_cores(self.state.get('cpus'), k)}; {len(pids)} processes")
        return "\n".join(lines)

    def link_down(self, k: int) -> None:
        """Cut node k's link (its switch port goes down): a fault to test with."""
        subprocess.run(self.on_switch([tool("ip"), "link", "set", f"n{k}", "down"]), check=True)

    def link_up(self, k: int) -> None:
        subprocess.run(self.on_switch([tool("ip"), "link", "set", f"n{k}", "up"]), check=True)

    def set_link(self, link: str | None) -> None:
        """Change every node's link rate on the running cluster, both ends as at start: "100mbit",
        "1gbit", ... or "unlimited". Running jobs see the new rate at once, later launches record it."""
        rate = parse_link(link)
        if rate:
            command = ["replace", "root", "tbf", "rate", rate, "burst", TBF_BURST, "latency", TBF_LATENCY]
        else:  # no qdisc: the veth's full speed
            command = ["del", "root"]
        for k in range(1, self.nodes + 1):
            for argv in (self.on_node(k, [tool("tc"), "qdisc", command[0], "dev", "eth0", *command[1:]]),
                         self.on_switch([tool("tc"), "qdisc", command[0], "dev", f"n{k}", *command[1:]])):
                done = subprocess.run(argv, capture_output=True, text=True)
                already_unlimited = not rate and ("handle of zero" in done.stderr or "No such" in done.stderr)
                if done.returncode != 0 and not already_unlimited:
                    raise RuntimeError(f"{' '.join(argv[-8:])}: {done.stderr.strip()}")
        self.link = rate
        self._write_state(link=rate, link_bytes_per_s=link_bytes_per_s(rate))

    def links_down(self) -> list[int]:
        """Nodes whose link is down."""
        out = _run(self.on_switch([tool("ip"), "-br", "link", "show", "master", "br0"]))
        return [int(line.split()[0].split("@")[0][1:]) for line in out.splitlines()
                if line.split() and line.split()[1] != "UP"]

    def faults(self) -> list[str]:
        """What the keeper noticed so far (links down and up, jobs it ended), oldest first."""
        try:
            text = Path(self.state["tmpdir"], "faults.log").read_text()
        except FileNotFoundError:
            return []
        return [line.split(" ", 1)[1].replace("gpulab emulated cluster: ", "") for line in text.splitlines()]


def _cores(cpus: list[list[int]] | None, k: int) -> str:
    if not cpus:
        return "every core"
    return f"core{'s' if len(cpus[k - 1]) > 1 else ''} {','.join(map(str, cpus[k - 1]))}"


def _rate_of(qdisc: str) -> str:
    match = re.search(r"rate (\S+)", qdisc)
    return f"rate {match.group(1)}" if match else ""


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True).stdout
