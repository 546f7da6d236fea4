"""Slotted-time queue model of a two-tier (ToR-Aggr) network under PRO's orchestrated round robin (paper 003,
sections III-A to III-C and IV, Figure 2), against random per-packet spraying on the same traffic.

The model is the one of the paper's proof (section IV-A), run instead of argued:

* ``n_tors`` ToR switches, each with ``n_hosts`` sending NICs (B_in) and ``n_uplinks`` uplinks (B_e); uplink ``u``
  of every ToR goes to Aggr switch ``u``. Each Aggr switch has ``n_links`` downlinks to every ToR (1 in the paper's
  topology), so a destination ToR has ``M = n_uplinks * n_links`` equivalent paths from any other ToR.
* Time is slotted. Every egress port has a FIFO queue and sends at most one packet per slot. A NIC sends at most one
  packet per slot (its link to the ToR has the same rate as every other link).
* In slot ``t``: the packets the ToR uplinks sent in slot ``t - 1`` join their Aggr downlink queues (one slot per
  hop), the packets the NICs send in slot ``t`` join their ToR uplink queues, then every non-empty queue sends one
  packet. A ToR uplink's packet goes on to the Aggr; an Aggr downlink's packet leaves the model (the destination
  ToR's host ports are not modelled: the traffic below never overloads them).
* The queue length reported for slot ``t`` is the backlog left after that slot's service: a packet that arrives at
  an idle port and leaves in the same slot is never counted, ``H`` packets arriving together at an idle port leave
  ``H - 1`` behind. In bytes: :data:`PACKET_BYTES` per packet (1,024, one RoCEv2 path MTU value, so KB equals
  packets). Buffers are unbounded: nothing is dropped, there is no PFC.

Traffic (:func:`all_to_all`): every NIC has one QP to every NIC of every other rack, all QPs active from slot 0 and
always backlogged (full load, synchronised). The NIC's QP scheduler serves the QPs of one destination rack in a
fixed order, ``batch`` packets per QP per turn, then moves to the next rack; the racks are staggered so that in every
slot the NICs of rack ``s`` all send to rack ``(s + 1 + b mod (T - 1)) mod T`` (``b`` the burst number), and NIC ``h``
starts its turn at destination host ``h``. So each destination rack receives exactly ``n_hosts <= n_uplinks``
packets per slot, no destination host receives more than one, and the only congestion left is the one path choice
makes.

Path choice, per packet, on that same traffic:

* ``"rr"``: PRO's orchestrated round robin, the golden model :class:`lbpipe.sim.pro.rr.RoundRobin`, one instance per
  sending NIC, every QP joined at slot 0, the counter C of every (NIC, destination rack) path set seeded with a
  random value in ``[0, M)`` (the paper's proof assumes unaligned initial states).
* ``"rr-aligned"``: the same with every C starting at 0 (Algorithm 1's "initial value zero" on every NIC).
* ``"random"``: uniform random per-packet spraying over the M paths.

The path index goes to ports through the same PathID the golden model writes into the UDP source port (section V):
low 6 bits the ToR egress port (the uplink), high 6 bits the Aggr egress port, the Aggr's ports numbered rack-major
(:func:`path_id_of`, written into every golden model's PathID table through ``ctl``; :func:`path_ports` decodes).
"""

import random
from collections import Counter, deque

__all__ = ["TwoTierNet", "RunResult", "all_to_all", "run", "path_id_of", "path_ports", "POLICIES", "PACKET_BYTES"]

#: Path-choice policies :func:`run` knows.
POLICIES = ("rr", "rr-aligned", "random")

#: Bytes per packet when queue lengths are given in bytes: 1 KB, so a backlog in packets is the same number in KB.
PACKET_BYTES = 1024


def path_id_of(path, *, dst_tor, n_uplinks, n_links=1):
    """The PathID the model gives path index ``path`` (0 to M - 1) of rack ``dst_tor``'s path set: uplink
    ``path mod n_uplinks`` (low 6 bits), Aggr egress port ``dst_tor * n_links + path // n_uplinks`` (high 6 bits).

    With one link per Aggr and rack this is the golden model's power-on PathID table (``path | tor << 6``); with
    more, :func:`run` writes it into the golden model's PathID table through ``ctl``.
    """
    return ((dst_tor * n_links + path // n_uplinks) << 6) | (path % n_uplinks)


def path_ports(path_id, *, dst_tor, n_links=1):
    """Ports a 12-bit PathID names for a packet to rack ``dst_tor``: ``(uplink, aggr_port)``.

    Low 6 bits: the ToR egress port, i.e. the uplink (and so the Aggr switch). High 6 bits: the Aggr egress port;
    the Aggr's ports are numbered rack-major (``n_links`` per rack), and a port that does not lead to ``dst_tor``
    is refused (the packet would reach the wrong rack).
    """
    if not 0 <= path_id < 1 << 12:
        raise ValueError(f"path_id must be 12 bits, not {path_id}")
    uplink, port = path_id & 0x3F, path_id >> 6
    if port // n_links != dst_tor:
        raise ValueError(f"path_id {path_id:#05x}: Aggr port {port} does not lead to rack {dst_tor}")
    return uplink, port


class TwoTierNet:
    """The queues of the two-tier network and their slotted service.

    Parameters
    ----------
    n_tors, n_uplinks : int
        Racks, and uplinks per ToR (= Aggr switches), 1 to 64 each.
    n_links : int
        Downlinks from each Aggr switch to each ToR.

    Members
    -------
    up : list of list of deque
        ``up[tor][uplink]``: the ToR uplink FIFO; each entry is the Aggr egress port of a waiting packet.
    down : list of list of int
        ``down[aggr][port]``: the Aggr downlink FIFO's length (its packets leave the model, their order is moot).
    slot : int
        Slots run so far.
    max_up, max_down : list of int
        Per slot, the largest ToR uplink and Aggr downlink backlog after service.
    hist_up, hist_down : Counter
        Backlog -> number of (queue, slot) pairs with it, over all slots and queues of the kind.
    sent, delivered : int
        Packets that entered the network, and packets that left an Aggr downlink.
    """

    def __init__(self, *, n_tors, n_uplinks, n_links=1):
        for name, v in (("n_tors", n_tors), ("n_uplinks", n_uplinks), ("n_links", n_links)):
            if not isinstance(v, int) or not 1 <= v <= 64:
                raise ValueError(f"{name} must be an integer 1 to 64, not {v!r}")
        if n_tors * n_links > 64:
            raise ValueError("an Aggr switch has at most 64 egress ports (6 bits of PathID)")
        self.n_tors, self.n_uplinks, self.n_links = n_tors, n_uplinks, n_links
        self.up = [[deque() for _ in range(n_uplinks)] for _ in range(n_tors)]
        self.down = [[0] * (n_tors * n_links) for _ in range(n_uplinks)]
        self._flight = []
        self.slot = 0
        self.max_up, self.max_down = [], []
        self.hist_up, self.hist_down = Counter(), Counter()
        self.sent = self.delivered = 0

    def step(self, packets):
        """Run one slot. ``packets``: what the NICs send in it, each ``(src_tor, uplink, aggr_port)``."""
        down = self.down
        for aggr, port in self._flight:
            down[aggr][port] += 1
        for src, uplink, port in packets:
            self.up[src][uplink].append(port)
            self.sent += 1
        flight = []
        top_up = 0
        for tor_queues in self.up:
            for uplink, q in enumerate(tor_queues):
                if q:
                    flight.append((uplink, q.popleft()))
                n = len(q)
                self.hist_up[n] += 1
                if n > top_up:
                    top_up = n
        top_down = 0
        for aggr_queues in down:
            for port, n in enumerate(aggr_queues):
                if n:
                    n -= 1
                    aggr_queues[port] = n
                    self.delivered += 1
                self.hist_down[n] += 1
                if n > top_down:
                    top_down = n
        self._flight = flight
        self.max_up.append(top_up)
        self.max_down.append(top_down)
        self.slot += 1

    def backlog(self):
        """Packets in the network: queued at uplinks, in flight to the Aggrs, queued at downlinks."""
        return (sum(len(q) for t in self.up for q in t) + len(self._flight)
                + sum(n for a in self.down for n in a))


def all_to_all(slot, *, n_tors, n_hosts, batch=1):
    """What every NIC sends in ``slot``: a list of ``(src_tor, host, dst_tor, dst_host)``, NIC by NIC.

    See the module docstring: bursts of ``n_hosts * batch`` slots per destination rack, racks staggered so that
    every destination rack receives from exactly one source rack per slot.
    """
    if n_tors < 2:
        raise ValueError("all-to-all between racks needs at least 2 ToRs")
    burst_len = n_hosts * batch
    offset = 1 + (slot // burst_len) % (n_tors - 1)
    turn = (slot % burst_len) // batch
    out = []
    for src in range(n_tors):
        dst = (src + offset) % n_tors
        for h in range(n_hosts):
            out.append((src, h, dst, (h + turn) % n_hosts))
    return out


class RunResult:
    """What :func:`run` returns.

    Members
    -------
    config : dict
        The arguments of :func:`run`.
    max_up, max_down : list of int
        Per slot, the largest ToR uplink and Aggr downlink backlog (packets).
    hist_up, hist_down : Counter
        Backlog histograms over all (queue, slot) pairs.
    sent, delivered, backlog : int
        Packets sent, delivered, still in the network at the end.
    paths : list
        With ``keep_paths=True``: per slot, the list of ``(src_tor, host, dst_tor, path)`` chosen.
    """

    def __init__(self, config, net, paths):
        self.config = config
        self.max_up, self.max_down = net.max_up, net.max_down
        self.hist_up, self.hist_down = net.hist_up, net.hist_down
        self.sent, self.delivered, self.backlog = net.sent, net.delivered, net.backlog()
        self.paths = paths

    def largest(self, kind="up", slots=None):
        """Largest backlog of ``kind`` (``"up"`` or ``"down"``) over the first ``slots`` slots (all by default)."""
        series = self.max_up if kind == "up" else self.max_down
        return max(series[:slots] if slots is not None else series)

    def percentile(self, q, kind="up"):
        """The ``q``-th percentile (0 to 100) of all backlogs of ``kind`` (nearest rank)."""
        hist = self.hist_up if kind == "up" else self.hist_down
        total = sum(hist.values())
        rank = max(1, -(-q * total // 100))
        seen = 0
        for n in sorted(hist):
            seen += hist[n]
            if seen >= rank:
                return n
        raise AssertionError("empty histogram")


class _RandomSpray:
    def __init__(self, rng, m_paths):
        self._rng, self._m = rng, m_paths

    def choose(self, src, host, qp, dst):
        return self._rng.randrange(self._m), None


class _Orchestrated:
    """One golden-model RoundRobin per NIC; every QP joined, every path set's C seeded."""

    def __init__(self, rng, *, n_tors, n_hosts, n_uplinks, n_links, batch, aligned, factory):
        from lbpipe.sim.pro.rr import RoundRobin, rr_commands
        m_paths = n_uplinks * n_links
        path_ids = [(t, p, path_id_of(p, dst_tor=t, n_uplinks=n_uplinks, n_links=n_links))
                    for t in range(n_tors) for p in range(m_paths)]
        self._nics = {}
        for src in range(n_tors):
            for h in range(n_hosts):
                nic = (factory or RoundRobin)(n_qps=n_tors * n_hosts, n_tors=n_tors, m_paths=m_paths, batch=batch)
                others = [d for d in range(n_tors) if d != src]
                seeds = [(d, 0 if aligned else rng.randrange(m_paths)) for d in others]
                joins = [(d * n_hosts + j, d) for d in others for j in range(n_hosts)]
                for cmd in rr_commands(seeds=seeds, path_ids=path_ids, joins=joins):
                    nic.control(cmd)
                self._nics[src, h] = nic

    def choose(self, src, host, qp, dst):
        out = self._nics[src, host].process({"qp": qp, "tor": dst})
        if not out["hit"]:
            raise AssertionError(f"NIC ({src}, {host}): QP {qp} towards rack {dst} missed in the round robin")
        return out["path"], out["path_id"]


def run(policy, *, n_tors=4, n_hosts=16, n_uplinks=16, n_links=1, n_slots=2000, seed=1, batch=1,
        keep_paths=False, rr_factory=None):
    """Run ``n_slots`` slots of :func:`all_to_all` traffic with path choice ``policy`` (one of :data:`POLICIES`).

    ``seed`` seeds one ``random.Random`` that draws the counters' initial values (``"rr"``) or the sprayed paths
    (``"random"``); the same arguments give the same result. ``n_hosts <= n_uplinks`` (no oversubscription;
    equality is full load at the core). ``batch`` is both the QP scheduler's batch (packets of a QP per turn) and
    the round robin's ``batch`` parameter; it must divide M. ``rr_factory`` replaces the golden model's
    ``RoundRobin`` class (same constructor and methods), for experiments with other schedulers.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    m_paths = n_uplinks * n_links
    if not 1 <= n_hosts <= n_uplinks:
        raise ValueError(f"n_hosts must be 1 to n_uplinks = {n_uplinks} (B_in <= B_e), not {n_hosts}")
    config = dict(policy=policy, n_tors=n_tors, n_hosts=n_hosts, n_uplinks=n_uplinks, n_links=n_links,
                  n_slots=n_slots, seed=seed, batch=batch)
    rng = random.Random(seed)
    net = TwoTierNet(n_tors=n_tors, n_uplinks=n_uplinks, n_links=n_links)
    if policy == "random":
        chooser = _RandomSpray(rng, m_paths)
    else:
        chooser = _Orchestrated(rng, n_tors=n_tors, n_hosts=n_hosts, n_uplinks=n_uplinks, n_links=n_links,
                                batch=batch,
                                aligned=policy == "rr-aligned", factory=rr_factory)
    kept = [] if keep_paths else None
    for slot in range(n_slots):
        packets = []
        chosen = []
        for src, h, dst, dst_host in all_to_all(slot, n_tors=n_tors, n_hosts=n_hosts, batch=batch):
            path, path_id = chooser.choose(src, h, dst * n_hosts + dst_host, dst)
            if path_id is None:
                path_id = path_id_of(path, dst_tor=dst, n_uplinks=n_uplinks, n_links=n_links)
            uplink, port = path_ports(path_id, dst_tor=dst, n_links=n_links)
            packets.append((src, uplink, port))
            if keep_paths:
                chosen.append((src, h, dst, path))
        net.step(packets)
        if keep_paths:
            kept.append(chosen)
    return RunResult(config, net, kept)

