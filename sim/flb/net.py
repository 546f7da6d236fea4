"""Closed-loop FLB network (FLB: sections 3.1 to 3.3, Figures 5-7; datasheet docs/flb_net.md; issue 17, "FLB
demonstration").

Two edge switches and ``n_paths`` parallel paths between them, stepped once per tick (one tick = one packet's
serialization time on any link; every link carries at most one packet per tick):

* **Source edge S1** (edge 0): one host per flow, each offering a packet per tick with its flow's probability (the
  arrival schedule is drawn once from the seed, so every mode sees the same traffic) into its send queue; the host
  sends its oldest queued packet in the tick unless its rate control holds it (below). Each packet sent goes
  through the path choice, then into the FIFO of the chosen uplink (one priority class per port, as the paper's
  Figure 6). S1 stamps one packet per path every ``sample_period`` ticks (section 3.1; 0: every packet).
  An uplink sends one packet per tick unless PFC has paused it; a sent packet reaches S2 ``prop`` ticks later
  (equal for every path: a symmetric leaf-spine; Algorithm 1 compares queueing delays only). Other leaves'
  traffic shares each path's FIFO (``cross``, packets per tick; it leaves toward hosts not modelled), which makes
  the paths' delays differ.
* **Destination edge S2** (edge 1): one FIFO per egress port (host), one packet per tick each. ``n_local`` local
  hosts on other ingress ports of S2 send to port 0 at line rate during ``[incast_on, incast_off)``: port 0 is
  oversubscribed (the incast of Figure 6(a)).
* **PFC** at S2, per ingress (each uplink's path and each local host): the packets S2 holds that came in on it are
  counted; at ``xoff`` or more the ingress is paused, at ``xon`` or less resumed; the pause (resume) reaches the
  upstream queue ``pfc_delay`` ticks later. A paused uplink holds every packet in its FIFO, whatever its
  destination: head-of-line blocking. S1's FIFOs are unbounded (S1 does not pause its hosts).
* **Receivers** count out-of-order deliveries from sequence numbers (a packet whose sequence number is below the
  highest delivered so far of its flow) and record each packet's latency (delivery tick - generation tick); each
  out-of-order delivery gets a cause from the network's ground truth (``_cause``).

The path choice (``mode``):

* ``"flb"``: the golden models in the loop: :class:`~lbpipe.sim.flb.isolate.Isolate` first, then
  :class:`~lbpipe.sim.flb.route.Route` (``upd=True``, ``force=True``); an isolated packet takes the isolation path,
  which the route records as the flow's, any other the route's path (the composition of docs/flb_isolate.md and
  ``flb-tx-wire``). The isolate's
  ``mask`` goes to the route's ``upd`` stream whenever it changes. At S2, :class:`~lbpipe.sim.flb.owd.Owd` measures
  every stamped packet and each arriving packet's reverse packet toward S1 carries the newest measurement back
  (``rev_delay`` ticks) into the route's delay table; :class:`~lbpipe.sim.flb.cnm.Cnm` sees every enqueue and
  dequeue of S2's egress FIFOs and its CNMs toward S1 reach the isolate ``cnm_delay`` ticks later. Without
  ``rate_control`` CNMs toward local hosts (edge 1) are dropped and no host reacts to a CNM.
* ``rate_control`` (``"flb"`` mode only; off by default): the minimal rate control of section 3.3 in every host.
  S1 forwards each CNM to its flow's host as it applies it to the isolate; S2 tells its local hosts ``pfc_delay``
  ticks after flb-cnm emits the CNM. A congestion CNM pauses the host (unless it is already paused or still
  congested at C/n: a refresh changes only ``n``); the release CNM resumes it at C/n, one packet every ``n``
  ticks, ``n`` the largest of the episode's CNMs; a pause lasts at most ``rc_max_pause`` ticks (then C/n without
  a release); ``rc_hold`` ticks after the release with no further CNM the host returns to its own rate.
* ``"flb_noiso"``: the same without the isolate and the CNMs (rerouting only; no rate control).
* ``"spray"``: per-packet spraying, a uniformly random path per packet (its own seeded generator).

Deterministic for a seed. Nothing of the RTL runs here.
"""

import random
from collections import deque

from lbpipe.sim.flb.cnm import Cnm
from lbpipe.sim.flb.isolate import Isolate
from lbpipe.sim.flb.owd import Owd
from lbpipe.sim.flb.route import Route

__all__ = ["FlbNetConfig", "FlbNet", "run_net", "MODES"]

MODES = ("flb", "flb_noiso", "spray")
SRC_EDGE, DST_EDGE = 0, 1
#: A host's rate control state: its own rate (the arrival schedule), paused, or limited to C/n.
RUN, PAUSE, LIMIT = "run", "pause", "limit"
#: Two flows toward the incast port 0 (0.2 packet per tick each), six toward ports 1-3 (0.05 each).
DEFAULT_FLOWS = ((0, 0.2), (0, 0.2)) + tuple((1 + i % 3, 0.05) for i in range(6))


class FlbNetConfig:
    """The model's parameters (keyword arguments; defaults are the datasheet's "default profile"). Times in ticks.

    ``flows``: one ``(port, rate)`` per S1 flow: the S2 egress port (receiver) and the probability of a packet per
    tick. Port 0 is the incast port.

    ``sample_period``: S1 stamps the first packet it puts on a path once ``sample_period`` ticks have passed since
    the path's last stamp (0: every packet; the paper's two base RTTs are 16 ticks here). ``rate_control``,
    ``rc_max_pause``, ``rc_hold``: the hosts' minimal rate control (module docstring).
    """

    def __init__(self, *, n_paths=4, n_ports=4, flows=DEFAULT_FLOWS, prop=4, rev_delay=4, cnm_delay=4, pfc_delay=1,
                 xoff=8, xon=4, threshold=8, n_local=3, incast_on=2000, incast_off=6000, stop=8000, drain=4000,
                 timeout=1024, time_bits=16, clock_offset=40_000, burst=1, cross=(0.8, 0.6, 0.4, 0.0), seed=1,
                 sample_period=0, rate_control=False, rc_max_pause=64, rc_hold=1024):
        if not 2 <= n_paths <= 16 or not 1 <= n_ports <= 16:
            raise ValueError("n_paths 2..16, n_ports 1..16")
        if not 0 < xon < xoff:
            raise ValueError("need 0 < xon < xoff")
        if sample_period < 0 or rc_max_pause < 1 or rc_hold < 1:
            raise ValueError("sample_period 0 (every packet) or more ticks; rc_max_pause, rc_hold 1 or more")
        for port, rate in flows:
            if not (0 <= port < n_ports and 0 < rate <= 1):
                raise ValueError(f"bad flow {(port, rate)}")
        self.n_paths, self.n_ports, self.flows = n_paths, n_ports, tuple(flows)
        self.prop, self.rev_delay, self.cnm_delay, self.pfc_delay = prop, rev_delay, cnm_delay, pfc_delay
        self.xoff, self.xon, self.threshold, self.n_local = xoff, xon, threshold, n_local
        self.incast_on, self.incast_off, self.stop, self.drain = incast_on, incast_off, stop, drain
        self.timeout, self.time_bits, self.clock_offset, self.seed = timeout, time_bits, clock_offset, seed
        self.burst = burst
        self.sample_period = sample_period
        self.rate_control, self.rc_max_pause, self.rc_hold = bool(rate_control), rc_max_pause, rc_hold
        self.cross = tuple(cross) + (0.0,) * (n_paths - len(cross))

    def replace(self, **kw):
        """A copy with the fields in ``kw`` changed."""
        return type(self)(**{**self.__dict__, **kw})


class FlbNet:
    """One run of the network in one ``mode`` (see the module docstring)."""

    def __init__(self, cfg, mode="flb"):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {MODES}")
        self.cfg, self.mode = cfg, mode
        n, tb = cfg.n_paths, cfg.time_bits
        self.mod = 1 << tb
        nf = len(cfg.flows)
        self.route = Route(n_flows=max(2, nf), n_dests=2, n_paths=n, time_bits=tb, delay_bits=tb,
                           timeout=cfg.timeout, upd=True, force=True)
        self.isolate = Isolate(n_flows=max(2, nf + cfg.n_local), n_dests=2, n_paths=n, n_slots=8, time_bits=tb,
                               timeout=cfg.timeout, n_ports=max(2, cfg.n_ports))
        self.owd = Owd(n_edges=2, n_paths=n, time_bits=tb, delay_bits=tb)
        self.cnm = Cnm(n_ports=max(2, cfg.n_ports), n_slots=8, n_edges=2, flow_bits=8, amount_bits=1, q_bits=16,
                       threshold=cfg.threshold)
        self.rng_spray = random.Random(cfg.seed * 7919 + 1)
        self.rng_cross = random.Random(cfg.seed * 7919 + 2)
        self.schedule = self._traffic()
        # state
        self.uplink = [deque() for _ in range(n)]          # S1's FIFOs: packets
        self.wire = deque()                                 # (arrive_tick, path, packet), in arrival order
        self.egress = [deque() for _ in range(cfg.n_ports)]   # S2's FIFOs: (ingress, packet)
        n_ing = n + cfg.n_local
        self.held = [0] * n_ing                             # S2's packets per ingress
        self.paused_s2 = [False] * n_ing                    # S2's pause decision per ingress
        self.paused_up = [False] * n_ing                    # what the upstream queue sees
        self.pending = []                                   # (tick, kind, payload), applied at S1 in order
        self.mask = 0
        self.seq = [0] * (nf + cfg.n_local)
        # the hosts of S1's flows (NICs): a send queue each, and the rate control's state (section 3.3)
        self.host_q = [deque() for _ in range(nf)]
        self.host = [{"state": RUN, "n": 0, "since": 0, "cnm": 0, "next": 0, "released": False}
                     for _ in range(nf + cfg.n_local)]      # S1's flows, then S2's local hosts
        self.last_sample = [None] * n                       # per path: the tick of S1's last sampled packet
        self.slot_tick = None                               # S1 tick of the measurement in flb-owd's slot
        self.meas_tick = [None] * n                         # per path: S1 tick of the route's newest delay
        self.max_seq = {}           # flow -> the delivered packet of highest sequence number
        # records
        self.deliveries = []        # (tick, flow, seq, latency, path)
        self.out_of_order = [0] * (nf + cfg.n_local)
        self.ooo_log = []           # (tick, flow, late seq, ahead seq, cause)
        self.pause_log = [[] for _ in range(n_ing)]     # per ingress: [start, end or None] at the upstream queue
        self.path_log = []          # (tick, flow, path, isolated)
        self.pause_ticks = [0] * n_ing
        self.queue_log = []         # (tick, [uplink lengths], port 0 length, mask)
        self.cnms = []              # (tick, flow, cong, n, cp)
        self.delay_writes = 0
        self.gen_log = []           # (tick, flow): every S1 packet generated (what the hosts offer)
        self.stamped = []           # (tick, flow): the S1 packets sent with a stamp (sampled)
        self.ages = []              # per S1 packet (flb modes): age of the route's delay for the path it took
        self.host_log = []          # (tick, flow, state, n): every change of a host's rate control state
        self.backlog_log = []       # (tick, [host queue lengths]), every 20 ticks

    def _traffic(self):
        """Per tick, the S1 flows that offer a packet: drawn once from the seed (the same in every mode). Each host
        alternates bursts at line rate (one packet per tick, geometric length of mean ``burst``) and idle gaps
        (geometric, mean ``burst * (1 - rate) / rate``), so its long-run rate is ``rate``."""
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        sched = [[] for _ in range(cfg.stop)]
        for f, (_, rate) in enumerate(cfg.flows):
            t = rng.randrange(int(cfg.burst / rate) + 1)          # a random phase
            p_end = 1 / cfg.burst
            p_wake = rate / (cfg.burst * (1 - rate)) if rate < 1 else 1.0
            on = True
            while t < cfg.stop:
                if on:
                    sched[t].append(f)
                    on = rng.random() >= p_end
                else:
                    on = rng.random() < p_wake
                t += 1
        return [sorted(x) for x in sched]

    # -- S1 ----------------------------------------------------------------------------------------------------

    def _s1_now(self, t):
        return t % self.mod

    def _apply_pending(self, t):
        keep = []
        for when, kind, item in self.pending:
            if when > t or kind == "pfc":
                keep.append((when, kind, item))
            elif kind == "delay":
                self.meas_tick[item["path"]] = item.pop("sent")
                self.route.process_stream("upd", item)
                self.delay_writes += 1
            elif kind == "cnm":
                item = dict(item, now=self._s1_now(t))
                self.isolate.process_stream("upd", item)
                if self.cfg.rate_control and item["flow"] < len(self.cfg.flows):
                    self._host_cnm(t, item["flow"], item["cong"], item["n"])
            elif kind == "local_cnm":
                self._host_cnm(t, *item)
        self.pending = keep

    # -- the hosts' minimal rate control (section 3.3) ---------------------------------------------------------

    def _host_set(self, t, flow, state):
        h = self.host[flow]
        h["state"], h["since"] = state, t
        if state == RUN:
            h["n"], h["released"] = 0, False
        if state == LIMIT:
            h["next"] = t
        self.host_log.append((t, flow, state, h["n"]))

    def _host_cnm(self, t, flow, cong, n):
        """A CNM reaches ``flow``'s host (S1's hosts through S1, in the tick S1 applies it to flb-isolate; S2's
        local hosts from S2, ``pfc_delay`` ticks after flb-cnm emits it). A congestion CNM pauses a flow running at
        its own rate or released; to a flow still congested (paused, or at C/n after ``rc_max_pause`` without a
        release) it only brings ``n`` (flb-cnm's refreshes). A release resumes a paused flow at C/n. ``n`` is the
        largest any CNM of the episode (since the host last ran at its own rate) reported."""
        h = self.host[flow]
        h["n"], h["cnm"] = max(h["n"], n), t
        if cong:
            if h["state"] == RUN or h["released"]:
                self._host_set(t, flow, PAUSE)
            h["released"] = False
        else:
            h["released"] = True
            if h["state"] == PAUSE:
                self._host_set(t, flow, LIMIT)

    def _host_tick(self, t):
        """A pause lasts until the flow's release CNM or ``rc_max_pause`` ticks (then C/n, still congested); C/n
        lasts until the release and ``rc_hold`` ticks without a CNM after it, then the host returns to its own
        rate."""
        cfg = self.cfg
        for flow, h in enumerate(self.host):
            if h["state"] == PAUSE and t - h["since"] >= cfg.rc_max_pause:
                self._host_set(t, flow, LIMIT)
            elif h["state"] == LIMIT and h["released"] and t - h["cnm"] >= cfg.rc_hold:
                self._host_set(t, flow, RUN)

    def _host_send(self, t, flow):
        """Whether ``flow``'s host puts its oldest queued packet on the wire toward S1 this tick."""
        h = self.host[flow]
        if h["state"] == RUN:
            return True
        if h["state"] == LIMIT and t >= h["next"]:
            h["next"] = t + h["n"]          # one packet per n ticks: C/n
            return True
        return False

    def _sample(self, t, path):
        """Section 3.1: S1 stamps one packet per path every ``sample_period`` ticks (the first packet it puts on
        the path once the period has passed since the path's last sample)."""
        last = self.last_sample[path]
        if self.cfg.sample_period and last is not None and t - last < self.cfg.sample_period:
            return 0
        self.last_sample[path] = t
        return 1

    def _choose(self, t, flow):
        now = self._s1_now(t)
        if self.mode == "spray":
            return self.rng_spray.randrange(self.cfg.n_paths), 0
        iso = None
        if self.mode == "flb":
            iso = self.isolate.process({"flow": flow, "dest": DST_EDGE, "now": now})
            if iso["mask"] != self.mask:
                self.mask = iso["mask"]
                self.route.process_stream("upd", {"isolate": 1, "dest": DST_EDGE, "mask": self.mask})
        forced = iso is not None and iso["isolated"]
        r = self.route.process({"kind": 1, "flow": flow, "dest": DST_EDGE, "now": now, "force": int(forced),
                                "fpath": iso["path"] if forced else 0})
        if forced:
            return iso["path"], 1
        return r["path"], 0

    def _s1(self, t):
        cfg = self.cfg
        self._apply_pending(t)
        if t < cfg.stop:
            for flow in self.schedule[t]:
                self.host_q[flow].append({"flow": flow, "seq": self.seq[flow], "born": t, "port": cfg.flows[flow][0]})
                self.seq[flow] += 1
                self.gen_log.append((t, flow))
        if cfg.rate_control:
            self._host_tick(t)
        for flow, hq in enumerate(self.host_q):
            if hq and self._host_send(t, flow):
                pkt = hq.popleft()
                path, isolated = self._choose(t, flow)
                if self.mode != "spray" and self.meas_tick[path] is not None:
                    self.ages.append(t - self.meas_tick[path])
                pkt.update(sent=t, stamp=self._s1_now(t), path=path, iso=isolated, dep=None,
                           sampled=self._sample(t, path))
                self.uplink[path].append(pkt)
                self.path_log.append((t, flow, path, isolated))
                if pkt["sampled"]:
                    self.stamped.append((t, flow))
        for p, rate in enumerate(self.cfg.cross):
            if rate and self.rng_cross.random() < rate:      # other leaves' traffic sharing the path's queue
                self.uplink[p].append(None)
        for p, q in enumerate(self.uplink):
            if q and not self.paused_up[p]:
                pkt = q.popleft()
                if pkt is not None:
                    pkt["dep"] = t
                self.wire.append((t + self.cfg.prop, p, pkt))

    # -- S2 ----------------------------------------------------------------------------------------------------

    def _s2_now(self, t):
        return (t + self.cfg.clock_offset) % self.mod

    def _enqueue(self, t, ingress, pkt, src):
        self.egress[pkt["port"]].append((ingress, pkt))
        self.held[ingress] += 1
        if self.mode == "flb":
            self._cnm(t, self.cnm.process({"port": pkt["port"], "deq": 0, "amount": 1, "flow": pkt["flow"],
                                           "src": src}))

    def _cnm(self, t, out):
        if out["cnm"]:
            self.cnms.append((t, out["cnm_flow"], out["cnm_cong"], out["cnm_n"], out["cnm_cp"]))
            if out["cnm_src"] == SRC_EDGE:
                self.pending.append((t + self.cfg.cnm_delay, "cnm",
                                     {"flow": out["cnm_flow"], "dest": DST_EDGE, "cp": out["cnm_cp"],
                                      "n": out["cnm_n"], "cong": out["cnm_cong"]}))
            elif self.cfg.rate_control:        # a local host of S2: its own edge switch tells it
                self.pending.append((t + self.cfg.pfc_delay, "local_cnm",
                                     (out["cnm_flow"], out["cnm_cong"], out["cnm_n"])))

    def _s2(self, t):
        cfg = self.cfg
        now2 = self._s2_now(t)
        arrived = []
        while self.wire and self.wire[0][0] <= t:       # every path has the same delay: the wire is a FIFO
            arrived.append(self.wire.popleft())
        for _, p, pkt in sorted(arrived, key=lambda w: w[1]):
            if pkt is None:         # cross traffic leaves toward hosts not modelled
                continue
            if self.mode != "spray" and pkt["sampled"]:
                self.owd.process({"kind": 1, "sampled": 1, "edge": SRC_EDGE, "path": p, "stamp": pkt["stamp"],
                                  "now": now2})
                self.slot_tick = pkt["sent"]
            self._enqueue(t, p, pkt, SRC_EDGE)
            if self.mode != "spray":
                self._reverse(t, now2)
        if cfg.incast_on <= t < cfg.incast_off:
            nf = len(cfg.flows)
            for j in range(cfg.n_local):
                ing = cfg.n_paths + j
                flow = nf + j
                if not self.paused_up[ing] and (not cfg.rate_control or self._host_send(t, flow)):
                    pkt = {"flow": flow, "seq": self.seq[flow], "born": t, "port": 0, "stamp": 0, "path": -1,
                           "iso": 0, "dep": t, "sampled": 0}
                    self.seq[flow] += 1
                    self._enqueue(t, ing, pkt, DST_EDGE)
        for port, q in enumerate(self.egress):
            if not q:
                continue
            ing, pkt = q.popleft()
            self.held[ing] -= 1
            if self.mode == "flb":
                self._cnm(t, self.cnm.process({"port": port, "deq": 1, "amount": 1, "flow": pkt["flow"],
                                               "src": SRC_EDGE if ing < cfg.n_paths else DST_EDGE}))
            self._deliver(t, pkt)
        for ing, h in enumerate(self.held):
            if not self.paused_s2[ing] and h >= cfg.xoff:
                self.paused_s2[ing] = True
                self.pending.append((t + cfg.pfc_delay, "pfc", (ing, True)))
            elif self.paused_s2[ing] and h <= cfg.xon:
                self.paused_s2[ing] = False
                self.pending.append((t + cfg.pfc_delay, "pfc", (ing, False)))

    def _reverse(self, t, now2):
        """The reverse packet (the ACK) an arriving data packet sends toward S1: it carries the newest
        measurement, which reaches the route's delay table ``rev_delay`` ticks later."""
        out = self.owd.process({"kind": 1, "reverse": 1, "to_edge": SRC_EDGE, "now": now2})
        if out["pb_valid"]:
            delay = min(out["pb_delay"], self.cfg.timeout)      # capped at the route's timeout (its datasheet)
            self.pending.append((t + self.cfg.rev_delay, "delay",
                                 {"isolate": 0, "dest": DST_EDGE, "path": out["pb_path"], "delay": delay,
                                  "sent": self.slot_tick}))

    def _deliver(self, t, pkt):
        f, s = pkt["flow"], pkt["seq"]
        ahead = self.max_seq.get(f)
        if ahead is not None and s < ahead["seq"]:
            self.out_of_order[f] += 1
            self.ooo_log.append((t, f, s, ahead["seq"], self._cause(pkt, ahead)))
        else:
            self.max_seq[f] = pkt
        self.deliveries.append((t, f, s, t - pkt["born"], pkt["path"]))

    def _cause(self, late, ahead):
        """Why ``late`` was overtaken by ``ahead`` (the network's ground truth, not the blocks'): ``"isolation"``
        when either was sent on an isolation path and they took different paths; ``"pfc"`` when ``late``'s uplink
        was paused while it waited there; ``"reroute"`` otherwise (the path choice moved the flow to a path that
        was faster than the delays it was decided on)."""
        if (late["iso"] or ahead["iso"]) and late["path"] != ahead["path"]:
            return "isolation"
        for start, end in self.pause_log[late["path"]]:
            if start <= late["dep"] and (end is None or end > late["born"]):
                return "pfc"
        return "reroute"

    def _pfc(self, t):
        """Pause frames that reach their upstream queue this tick."""
        keep = []
        for item in self.pending:
            when, kind, val = item
            if kind == "pfc" and when <= t:
                ing, on = val
                if on != self.paused_up[ing]:
                    if on:
                        self.pause_log[ing].append([t, None])
                    else:
                        self.pause_log[ing][-1][1] = t
                self.paused_up[ing] = on
            else:
                keep.append(item)
        self.pending = keep

    def run(self):
        cfg = self.cfg
        for t in range(cfg.stop + cfg.drain):
            self._pfc(t)
            self._s1(t)
            self._s2(t)
            for i, p in enumerate(self.paused_up):
                self.pause_ticks[i] += p
            if t % 20 == 0:
                self.queue_log.append((t, [len(q) for q in self.uplink], len(self.egress[0]), self.mask))
                self.backlog_log.append((t, [len(q) for q in self.host_q]))
        return self

    # -- measurements --------------------------------------------------------------------------------------------

    def flow_stats(self, flows, t0, t1):
        """For ``flows`` over ``[t0, t1)``: packets delivered in the window per tick (``tput``, counted at the
        receivers); over the packets *generated* in the window, mean and 99th-percentile latency (ticks) of those
        delivered by the end of the run and how many were not (``late``)."""
        flows = set(flows)
        lat = sorted(d[3] for d in self.deliveries if d[1] in flows and t0 <= d[0] - d[3] < t1)
        got = sum(1 for d in self.deliveries if d[1] in flows and t0 <= d[0] < t1)
        sent = sum(1 for t in range(t0, min(t1, self.cfg.stop)) for f in self.schedule[t] if f in flows)
        if not lat:
            return {"tput": got / (t1 - t0), "mean": float("inf"), "p99": float("inf"), "late": sent}
        return {"tput": got / (t1 - t0), "mean": sum(lat) / len(lat),
                "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))], "late": sent - len(lat)}


def run_net(cfg=None, mode="flb", **kw):
    """Build and run one network; ``kw`` override the config's fields."""
    cfg = (cfg or FlbNetConfig()).replace(**kw) if kw else (cfg or FlbNetConfig())
    return FlbNet(cfg, mode).run()
