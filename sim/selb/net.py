"""Leaf-spine network with SELB's golden models in the loop (SELB: section III, Figures 3 and 4, the evaluation's
topology in section IV-A; datasheet docs/selb_net.md; issue 18, "Demonstration (sim network)").

``n_leaves`` leaf switches (ToRs), ``n_spines`` spine switches, ``hosts`` hosts per leaf, every link one packet per
tick (one tick = one packet's serialization time at the common link rate) and ``prop`` ticks long. A path between two
leaves is a spine (``n_spines`` paths). Stepped once per tick:

* **Hosts** send the flows of a schedule drawn once from the seed (so every mode sees the same traffic): flows arrive
  per host as a Poisson process until ``stop``, toward a uniformly random host of another leaf, with sizes from
  ``sizes``; a host sends one packet per tick, round robin over its unfinished flows, each flow whole. No congestion
  control and no PFC: every FIFO is unbounded, nothing is dropped.
* **Source ToR** (every leaf): each packet from a host is looked up in
  :class:`~lbpipe.sim.selb.cluster.Cluster` on its flow's path (the wire's path mirror: the path the flow's previous
  packet left on; a new flow's first packet: an ECMP hash of the flow), then decided by
  :class:`~lbpipe.sim.selb.reroute.Reroute` (selb-reroute's composition, docs/selb_reroute.md), and queued on the
  uplink of the path it leaves on. Every ``period`` ticks the leaf samples its uplink FIFOs' lengths into the
  cluster's ``smp`` stream and ends the period with a tick.
* **Spines**: one FIFO per downlink (destination leaf).
* **Destination ToR** (every leaf): every packet from a spine (in spine order within a tick) goes into
  :class:`~lbpipe.sim.selb.reorder.Reorder` as an item (``tag`` = the switch's handle of the packet); what the block
  releases goes to the host's egress FIFO, in release order. A tick in which a leaf holds packets and receives
  none, the leaf sends the block one ``OTHER`` item carrying ``now`` (the block checks its timeouts with items
  only, docs/selb_reorder.md).

The rerouting target (``mode``), the only difference between the runs:

* ``"selb"``: selb-cluster's ``alt`` as the blocks are built: the non-congested paths of the flow's path's cluster,
  or, when that cluster is wholly congested, the backup set's non-congested paths (0 when those are all congested
  too: selb-reroute then takes ``shortest``).
* ``"random"`` (ConWeave-like): ``alt`` = every non-congested path of all clusters, read from the same cluster
  block (its ``congested`` flag of each path, looked up once per sample period after the tick; between ticks the
  published flags do not change), so the same selb-reroute block draws the target.

Each reroute records where its target came from (``target``: ``"cluster"``, a free mate in the old path's
cluster; ``"backup"``, the backup set's free paths, that cluster being wholly congested; ``"any"``, random mode's
non-congested paths; ``"shortest"``, ``alt`` empty). In selb mode the leaf looks every path up at the tail to tell
the first two apart (the published cluster and congested flag of each path; they change only at a tick).

Everything is measured by the network, not by the blocks: per packet its ticks (sent, ToR arrival, release from
the reorder block, delivery), the path it took and its reroute episode (how many tails of its flow went before it);
per reroute the tick of the decision, the old and new paths and their uplink queues then; per reorder-buffer use
(a burst of ``held`` items of one flow released together) the ticks from the first held packet's arrival to the
release and what released it (``_occupancy``); at the hosts the sequence numbers in delivery order.

Deterministic for a seed. Nothing of the RTL runs here.
"""

import random
from collections import deque

from lbpipe.hdl.lib.meta import PacketKind
from lbpipe.sim.selb.cluster import Cluster
from lbpipe.sim.selb.reorder import Reorder
from lbpipe.sim.selb.reroute import Reroute

__all__ = ["SelbNetConfig", "SelbNet", "run_net", "MODES"]

MODES = ("selb", "random")
DATA, OTHER = PacketKind.DATA.value, PacketKind.OTHER.value
#: Flow sizes in packets and their weights: mostly short flows and a few long ones (a heavy tail, as the storage
#: and Hadoop workloads of the paper's evaluation; mean 65.7 packets).
DEFAULT_SIZES = ((2, 0.3), (8, 0.3), (32, 0.2), (128, 0.12), (512, 0.08))


class SelbNetConfig:
    """The model's parameters (keyword arguments; defaults are the datasheet's "default profile"). Times in ticks.

    ``load``: each host's offered load, a fraction of its link (2:1 over-subscription: ``hosts`` / ``n_spines``
    = 2, so the uplinks see twice this on average). ``sizes``: ``(packets, weight)`` pairs of the flow sizes.
    """

    def __init__(self, *, n_leaves=8, n_spines=8, hosts=16, prop=10, load=0.3, sizes=DEFAULT_SIZES, stop=1000,
                 drain=3000, period=16, theta=4, k=2, hold=256, n_buffers=8, depth=256, timeout=2048,
                 n_flows=4096, seed=1):
        if not 2 <= n_leaves <= 64 or n_spines not in (2, 4, 8, 16, 32, 64) or not 1 <= hosts <= 256:
            raise ValueError("n_leaves 2..64, n_spines a power of two 2..64, hosts 1..256")
        if not 0 < load < 1:
            raise ValueError("load must be in (0, 1)")
        if not sizes or any(n < 1 or w <= 0 for n, w in sizes):
            raise ValueError("sizes: (packets >= 1, weight > 0) pairs")
        if prop < 1 or period < 1 or stop < 1 or drain < 0:
            raise ValueError("prop, period, stop >= 1, drain >= 0")
        self.n_leaves, self.n_spines, self.hosts, self.prop = n_leaves, n_spines, hosts, prop
        self.load, self.sizes, self.stop, self.drain = load, tuple(sizes), stop, drain
        self.period, self.theta, self.k, self.hold = period, theta, k, hold
        self.n_buffers, self.depth, self.timeout, self.n_flows, self.seed = n_buffers, depth, timeout, n_flows, seed

    def replace(self, **kw):
        """A copy with the fields in ``kw`` changed."""
        return type(self)(**{**self.__dict__, **kw})


def _seed16(rng):
    return rng.randrange(1, 1 << 16)


class SelbNet:
    """One run of the network in one ``mode`` (see the module docstring)."""

    def __init__(self, cfg, mode="selb"):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {MODES}")
        self.cfg, self.mode = cfg, mode
        nl, ns = cfg.n_leaves, cfg.n_spines
        self.mod = 1 << 16
        self.flows = self._traffic()            # (start, src host, dst host, size), by start tick
        per_src, per_dst = [0] * nl, [0] * nl
        self.src_index, self.dst_index = [], []    # per flow: its index in the leaf's flow tables
        for _, src, dst, _ in self.flows:
            self.src_index.append(per_src[src // cfg.hosts])
            self.dst_index.append(per_dst[dst // cfg.hosts])
            per_src[src // cfg.hosts] += 1
            per_dst[dst // cfg.hosts] += 1
        if max(per_src + per_dst) > cfg.n_flows:
            raise ValueError(f"{max(per_src + per_dst)} flows at a leaf: more than n_flows {cfg.n_flows} (an index "
                             f"used twice would carry one flow's state into another's)")
        rng = random.Random(cfg.seed * 7919 + 3)    # the blocks' LFSR seeds and the ECMP hash, the same in all modes
        self.cluster = [Cluster(n_paths=ns, k=cfg.k, theta=cfg.theta, lfsr_seed=_seed16(rng)) for _ in range(nl)]
        self.reroute = [Reroute(n_flows=cfg.n_flows, n_paths=ns, hold=cfg.hold, lfsr_seed=_seed16(rng))
                        for _ in range(nl)]
        self.reorder = [Reorder(n_flows=cfg.n_flows, n_buffers=cfg.n_buffers, depth=cfg.depth, timeout=cfg.timeout)
                        for _ in range(nl)]
        self.ecmp = [rng.randrange(ns) for _ in self.flows]
        # state
        self.host_flows = [deque() for _ in range(nl * cfg.hosts)]     # unfinished flows per host (round robin)
        self.next_flow = 0
        self.sent = [0] * len(self.flows)
        self.mirror = {}                            # flow -> the path its previous packet left on
        self.episode = [0] * len(self.flows)
        self.uplink = [[deque() for _ in range(ns)] for _ in range(nl)]
        self.down = [[deque() for _ in range(nl)] for _ in range(ns)]
        self.egress = [deque() for _ in range(nl * cfg.hosts)]
        self.wire = {}                              # tick -> [(stage, where, packet)]
        self.tags = [{} for _ in range(nl)]         # per destination ToR: tag -> packet held by the switch
        self.next_tag = [0] * nl
        self.n_arrived = self.n_released = 0        # arrival and release order at the ToRs, over the network
        self.noncongested = [(1 << ns) - 1] * nl    # random mode: every path the cluster does not flag
        self.pending_reroute = {}                   # flow -> its reroute record waiting for the new path
        # records
        self.send_log = []          # (tick, flow, seq): what the hosts offered
        self.packets = []           # every packet (dict), in send order
        self.reroutes = []          # per tail: {tick, leaf, flow, old, new, q_old, q_new, episode, alt_empty, target}
        self.occupancy = []         # per buffer use: {flow, leaf, first, release, ticks, items, cause}
        self.deliveries = []        # (tick, flow, seq)
        self.out_of_order = 0
        self.top = [-1] * len(self.flows)
        self.queue_log = []         # (tick, leaf 0's uplink lengths)

    def _traffic(self):
        """Flows (start tick, source host, destination host, size in packets), drawn once from the seed: per host
        a Poisson process of mean rate ``load / mean size`` flows per tick until ``stop``."""
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        total = sum(w for _, w in cfg.sizes)
        mean = sum(n * w for n, w in cfg.sizes) / total
        rate = cfg.load / mean
        n_hosts = cfg.n_leaves * cfg.hosts
        flows = []
        for h in range(n_hosts):
            t = rng.expovariate(rate)
            while t < cfg.stop:
                leaf = h // cfg.hosts
                dst = rng.randrange(n_hosts - cfg.hosts)
                if dst >= leaf * cfg.hosts:                 # another leaf's host
                    dst += cfg.hosts
                r, size = rng.random() * total, cfg.sizes[-1][0]
                for n, w in cfg.sizes:
                    if r < w:
                        size = n
                        break
                    r -= w
                flows.append((int(t), h, dst, size))
                t += rng.expovariate(rate)
        flows.sort(key=lambda f: (f[0], f[1]))
        return flows

    # -- hosts and source ToR ----------------------------------------------------------------------------------

    def _hosts(self, t, later):
        cfg = self.cfg
        while self.next_flow < len(self.flows) and self.flows[self.next_flow][0] <= t:
            f = self.next_flow
            self.host_flows[self.flows[f][1]].append(f)
            self.next_flow += 1
        for h, q in enumerate(self.host_flows):
            if not q:
                continue
            f = q.popleft()
            seq = self.sent[f]
            self.sent[f] += 1
            if self.sent[f] < self.flows[f][3]:
                q.append(f)
            self.send_log.append((t, f, seq))
            pkt = {"flow": f, "seq": seq, "born": t, "src": h // cfg.hosts, "dst": self.flows[f][2]}
            self.packets.append(pkt)
            later.append(("src", h // cfg.hosts, pkt))

    def _sample(self, leaf):
        """The end of a sample period: every uplink's length, then the tick. In random mode, then read every path's
        published congested flag (one lookup per path)."""
        cl, up = self.cluster[leaf], self.uplink[leaf]
        for p, q in enumerate(up):
            cl.process_stream("smp", {"path": p, "qlen": min(len(q), 0xFFFF), "tick": 0})
        cl.process_stream("smp", {"path": 0, "qlen": 0, "tick": 1})
        if self.mode == "random":
            self.noncongested[leaf] = sum(1 << p for p, (_, cg) in enumerate(self._published(leaf)) if not cg)

    def _published(self, leaf):
        """Every path's published (cluster, congested flag), one lookup each."""
        cl = self.cluster[leaf]
        looks = (cl.process({"kind": OTHER, "path": p, "tag": 0}) for p in range(self.cfg.n_spines))
        return [(x["cluster"], x["congested"]) for x in looks]

    def _source(self, t, leaf, pkt):
        f = pkt["flow"]
        path = self.mirror.get(f, self.ecmp[f])
        tag = len(self.packets) & 0xFFFF
        look = self.cluster[leaf].process({"kind": DATA, "path": path, "tag": tag})
        alt = look["alt"] if self.mode == "selb" else self.noncongested[leaf]
        out = self.reroute[leaf].process({"kind": DATA, "tag": tag, "flow": self.src_index[f], "now": t % self.mod,
                                          "path": path, "congested": look["congested"], "alt": alt,
                                          "shortest": look["shortest"]})
        p = out["path"]
        self.mirror[f] = p
        up = self.uplink[leaf]
        rec = self.pending_reroute.pop(f, None)
        if rec is not None:                 # the flow's first packet after a tail: the reroute's new path
            rec["new"], rec["q_new"] = p, len(up[p])
        pkt.update(path=p, tail=out["tail"], epoch=out["epoch"], episode=self.episode[f], src_tick=t)
        if out["tail"]:
            if alt == 0:
                target = "shortest"
            elif self.mode == "random":
                target = "any"
            else:                           # a free mate in the old path's cluster, or the backup set's
                pub = self._published(leaf)
                target = "cluster" if any(c == pub[p][0] and not g for c, g in pub) else "backup"
            rec = {"tick": t, "leaf": leaf, "flow": f, "old": p, "new": None, "q_old": len(up[p]), "q_new": None,
                   "episode": self.episode[f], "alt_empty": alt == 0, "target": target}
            self.reroutes.append(rec)
            self.pending_reroute[f] = rec
            self.episode[f] += 1
        up[p].append(pkt)

    # -- destination ToR and hosts -----------------------------------------------------------------------------

    def _dest(self, t, leaf, pkts):
        """Packets from the spines (in spine order) into the leaf's reorder block; what it releases to the hosts."""
        rb, tags = self.reorder[leaf], self.tags[leaf]
        if not pkts and not tags:
            return
        items = []
        for pkt in pkts:
            tag = self.next_tag[leaf]
            self.next_tag[leaf] = (tag + 1) & 0xFFFF
            tags[tag] = pkt
            pkt["arr_tor"], pkt["arr_order"] = t, self.n_arrived
            self.n_arrived += 1
            items.append({"kind": DATA, "tag": tag, "flow": self.dst_index[pkt["flow"]], "epoch": pkt["epoch"],
                          "tail": pkt["tail"], "now": t % self.mod})
        if not items and tags:
            items.append({"kind": OTHER, "tag": 0, "flow": 0, "epoch": 0, "tail": 0, "now": t % self.mod})
        for item in items:
            out = rb.step(item)
            burst = []
            for o in out:
                if o["kind"] != DATA:
                    continue
                pkt = tags.pop(o["tag"])
                pkt["released"], pkt["held"], pkt["rel_order"] = t, o["held"], self.n_released
                self.n_released += 1
                self.egress[pkt["dst"]].append(pkt)
                if o["held"]:
                    burst.append(pkt)
            if burst:
                self._occupancy(t, leaf, item, burst)

    def _occupancy(self, t, leaf, item, burst):
        """One buffer's release: from the first held packet's arrival to now; ``cause`` from what released it (the
        network's view of the item that went in): ``tail`` (the flow's old-path tail), ``timeout`` (another flow's
        item or an idle one), ``second`` (a tail of the held epoch), ``overflow`` (an item of the held epoch)."""
        pkt = burst[0]
        own = item["kind"] == DATA and self.dst_index[pkt["flow"]] == item["flow"]
        if not own:
            cause = "timeout"
        elif item["epoch"] != pkt["epoch"]:
            cause = "tail"
        elif item["tail"]:
            cause = "second"
        else:
            cause = "overflow"
        first = min(p["arr_tor"] for p in burst)
        self.occupancy.append({"flow": pkt["flow"], "leaf": leaf, "first": first, "release": t, "ticks": t - first,
                               "items": len(burst), "cause": cause, "episode": pkt["episode"]})

    def _deliver(self, t, pkt):
        f, s = pkt["flow"], pkt["seq"]
        pkt["delivered"] = t
        if s < self.top[f]:
            self.out_of_order += 1
        else:
            self.top[f] = s
        self.deliveries.append((t, f, s))

    # -- the tick ------------------------------------------------------------------------------------------------

    def step(self, t):
        cfg = self.cfg
        later = self.wire.setdefault(t + cfg.prop, [])      # every hop takes ``prop``: what is sent now
        self._hosts(t, later)
        arriving = self.wire.pop(t, [])
        at_dest = [[] for _ in range(cfg.n_leaves)]
        if t % cfg.period == 0:
            for leaf in range(cfg.n_leaves):
                self._sample(leaf)
        for stage, where, pkt in arriving:
            if stage == "src":
                self._source(t, where, pkt)
            elif stage == "spine":
                self.down[where][pkt["dst"] // cfg.hosts].append(pkt)
            elif stage == "dst":
                at_dest[where].append(pkt)
            else:
                self._deliver(t, pkt)
        for leaf in range(cfg.n_leaves):
            self._dest(t, leaf, sorted(at_dest[leaf], key=lambda p: p["path"]))
        for leaf, ups in enumerate(self.uplink):
            for s, q in enumerate(ups):
                if q:
                    later.append(("spine", s, q.popleft()))
        for s, downs in enumerate(self.down):
            for leaf, q in enumerate(downs):
                if q:
                    later.append(("dst", leaf, q.popleft()))
        for q in self.egress:
            if q:
                later.append(("host", 0, q.popleft()))
        if t % cfg.period == 0:
            self.queue_log.append((t, [len(q) for q in self.uplink[0]]))

    def run(self):
        """Tick until ``stop + drain``, or earlier once every flow is sent whole and every packet delivered
        (nothing changes after that)."""
        cfg = self.cfg
        for t in range(cfg.stop + cfg.drain):
            self.step(t)
            if t >= cfg.stop and self.next_flow == len(self.flows) and len(self.deliveries) == len(self.packets) \
                    and not any(self.host_flows):
                break
        self.end = t
        return self

    # -- measurements --------------------------------------------------------------------------------------------

    def outcomes(self):
        """Per reroute (per tail sent), from the network's record only: ``early`` = the packets of the new path that
        reached the destination ToR before the tail; ``kind`` ``"in order"`` (none early), ``"protected"`` (every
        early packet left the ToR after the tail), ``"unprotected"`` (one or more before it); ``wait`` = the tail's
        arrival minus the first early packet's (0 when none); ``first_early``: the flow's first packet to reach the
        ToR was already of a later path (the flow's start reached the ToR after its first tail); ``target`` the
        reroute's (see the module docstring); ``why``, for an unprotected reroute, what let an early packet leave
        before the tail: the buffer use of this episode that ended other than by the tail (``"timeout"``,
        ``"overflow"``, ``"second"``), else ``"fallback"`` (no buffer free: early packets passed unordered)."""
        by = {}
        for p in self.packets:
            by.setdefault(p["flow"], []).append(p)
        ended = {(o["flow"], o["episode"]): o["cause"] for o in self.occupancy if o["cause"] != "tail"}
        out = []
        for rec in self.reroutes:
            f, e = rec["flow"], rec["episode"]
            pk = by[f]
            tail = next(p for p in pk if p["episode"] == e and p["tail"])
            early = [p for p in pk if p["episode"] == e + 1 and p["arr_order"] < tail["arr_order"]]
            first = min(pk, key=lambda p: p["arr_order"])
            why = None
            if not early:
                kind, wait = "in order", 0
            else:
                kind = "unprotected" if any(p["rel_order"] < tail["rel_order"] for p in early) else "protected"
                wait = tail["arr_tor"] - min(p["arr_tor"] for p in early)
                if kind == "unprotected":
                    why = ended.get((f, e + 1), "fallback")
            out.append({"flow": f, "episode": e, "tick": rec["tick"], "kind": kind, "wait": wait,
                        "early": len(early), "first_early": first["episode"] > 0, "alt_empty": rec["alt_empty"],
                        "target": rec["target"], "why": why})
        return out

    def arrival_disorder(self):
        """Packets that reached their destination ToR below the highest sequence number already arrived of their
        flow (what the hosts would see without the reorder blocks)."""
        top, n = {}, 0
        for p in sorted(self.packets, key=lambda p: p["arr_order"]):
            f = p["flow"]
            if p["seq"] < top.get(f, -1):
                n += 1
            top[f] = max(top.get(f, -1), p["seq"])
        return n

    def stats(self):
        """The reorder blocks' counters summed over the leaves (docs/selb_reorder.md's STATUS order): items, held,
        reorders, timeouts, overflows, second reroutes, fallbacks, stale tails; and the reroute blocks' (packets,
        reroutes, to the shortest path, stale)."""
        ro = [sum(rb.stats()[i] for rb in self.reorder) for i in range(8)]
        rr = [sum(b.stats()[i] for b in self.reroute) for i in range(4)]
        keys = ("items", "held", "reorders", "timeouts", "overflows", "second", "fallbacks", "stale_tails")
        return dict(zip(keys, ro)), dict(zip(("packets", "reroutes", "to_shortest", "stale"), rr))


def run_net(cfg=None, mode="selb", **kw):
    """Build and run one network; ``kw`` override the config's fields."""
    cfg = (cfg or SelbNetConfig()).replace(**kw) if kw else (cfg or SelbNetConfig())
    return SelbNet(cfg, mode).run()
