"""compat doctor --live --fabric, the pure part: which host pairs are measured in which round, bus bandwidth as
nccl-tests defines it, and the judgement that names a slow link or a slow host. No I/O, no torch.

Schedules
    ``all``      every pair once, by the circle method (round-robin tournament): N-1 rounds for even N, N rounds for odd N
                 (one host sits out each round), no host in two pairs of a round. Cost: rounds x per-pair seconds.
    ``ring``     host i with host i+1 (mod N): N pairs in 2 rounds (3 for odd N). Every host is in two pairs, so a slow
                 host (its NIC, its cable) is always found, and a slow link is found when it lies on the ring.
    ``sample:K`` the ring plus K rounds drawn at random (seeded) from the circle-method schedule of a shuffled host order:
                 N + K*N/2 pairs at most. A slow link between two given hosts off the ring is measured with probability
                 exactly K/(N-1) for even N (K/N for odd N): each pair lies in exactly one round of the full schedule.

Judgement
    A link is *slow* when its bandwidth is below ``SLOW_FRACTION`` of what a healthy link measures: the median over hosts
    of each host's fastest link (healthy_reference; it holds while fewer than half the hosts are bad, where the median
    of all links fails once faults touch most links). A host is slow when every one of
    its (at least two) measured links is slow and its slow links are not all explained by slow peers; a slow link is
    named on its own when neither end is a slow host. On a ring a host has two links, so some patterns are ambiguous
    (slow hosts at every other place look like the good hosts between them): ``all`` mode has no such ambiguity. A host's memcpy bandwidth is judged the same way against the
    median host. With +-15% noise two healthy values differ by at most 1.15/0.85 = 1.35x, far from the 2x threshold.
"""

from __future__ import annotations

import random
import re
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

if TYPE_CHECKING:  # the worker imports this module alone (copied into the run folder): the protocol only for the types
    from .protocol import InterfaceFacts

Pair = tuple[int, int]  # (a, b) with a < b: host indices
SLOW_FRACTION = 0.5  # a link (or a host's memcpy) below half the median is "far below the others"

# nccl-tests doc/PERFORMANCE.md, "Summary": "To obtain a bus bandwidth which should be independent of the number of
# ranks n, we apply a correction factor to the algorithm bandwidth: AllReduce: 2*(n-1)/n, ReduceScatter: (n-1)/n,
# AllGather: (n-1)/n, Broadcast: 1, Reduce: 1, AlltoAll: (n-1)/n". algbw = S/t, where S is, as in its src/*.cu GetBw
# functions, the bytes of one rank's buffer for allreduce/broadcast and of the whole gathered buffer (count*nranks)
# for allgather, reduce_scatter and all_to_all.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' correction factor from algorithm bandwidth to bus bandwidth for ``ranks`` ranks."""
    if ranks < 1:
        raise ValueError("ranks must be at least 1")
    if collective == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    if collective == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def bandwidths(collective: str, size_bytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes per second; ``size_bytes`` is nccl-tests' S (see COLLECTIVES)."""
    if seconds <= 0:
        raise ValueError("seconds must be positive")
    algbw = size_bytes / seconds
    return algbw, algbw * bus_factor(collective, ranks)


def sweep_sizes(limit_bytes: int, start: int = 1024, step: int = 4) -> list[int]:
    """1 KiB up by powers of ``step`` while at most ``limit_bytes``."""
    sizes = []
    size = start
    while size <= limit_bytes:
        sizes.append(size)
        size *= step
    return sizes


MAX_SIZE = 1 << 34  # 16 GiB: beyond any CPU sweep; a larger --sizes is a typo
UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_sizes(text: str) -> tuple[int, ...]:
    """``1K,64K,4M`` -> bytes, sorted and distinct (K = 1024); ValueError naming the bad item otherwise."""
    sizes = set()
    for item in text.split(","):
        token = item.strip().lower()
        digits = token.rstrip("kmgib")
        unit = token[len(digits):]
        if not digits.isdigit() or not digits.isascii() or unit not in UNITS:
            raise ValueError(f"--sizes item {item.strip()!r} is not a size in bytes (e.g. 4096, 64K, 4M)")
        size = int(digits) * UNITS[unit]
        if not 1 <= size <= MAX_SIZE:
            raise ValueError(f"--sizes item {item.strip()!r} is outside 1 byte .. 16G")
        sizes.add(size)
    return tuple(sorted(sizes))


DEADLINE_RANGE = (1, 3600)  # --fabric-deadline: whole seconds from one second to an hour, decimals allowed
_DECIMAL_SECONDS = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,3})?")  # 60, 90.5: no exponent, sign, '_', or other scripts' digits


def parse_deadline(text: str) -> float:
    """--fabric-deadline as given: plain decimal seconds (``60``, ``90.5``) within DEADLINE_RANGE; ValueError with the one
    sentence otherwise (float() would take 1e-9, 1_0, nan and '٦٠')."""
    token = text.strip()
    low, high = DEADLINE_RANGE
    if not token.isascii() or not _DECIMAL_SECONDS.fullmatch(token) or not low <= float(token) <= high:
        raise ValueError(f"--fabric-deadline {text.strip()[:40]!r} is not plain decimal seconds from {low} to {high}")
    return float(token)


# --- schedules -----------------------------------------------------------------------------------------------------

def round_robin(hosts: int) -> list[list[Pair]]:
    """Every pair of ``hosts`` exactly once, in rounds where no host appears twice (the circle method)."""
    if hosts < 2:
        return []
    order: list[Optional[int]] = list(range(hosts))
    if hosts % 2:
        order.append(None)  # the bye: whoever meets it sits this round out
    size = len(order)
    rounds = []
    for _ in range(size - 1):
        pairs = []
        for i in range(size // 2):
            a, b = order[i], order[size - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(pairs)
        order = [order[0], order[-1], *order[1:-1]]  # host 0 stays, the others turn one place
    return rounds


def into_rounds(pairs: Iterable[Pair]) -> list[list[Pair]]:
    """Pairs packed greedily into rounds with no host twice in a round (each pair in the first round that has room)."""
    rounds: list[list[Pair]] = []
    busy: list[set[int]] = []
    for a, b in pairs:
        for index, used in enumerate(busy):
            if a not in used and b not in used:
                rounds[index].append((a, b))
                used.update((a, b))
                break
        else:
            rounds.append([(a, b)])
            busy.append({a, b})
    return rounds


def ring_pairs(hosts: int) -> list[Pair]:
    if hosts < 2:
        return []
    if hosts == 2:
        return [(0, 1)]
    return [(min(i, (i + 1) % hosts), max(i, (i + 1) % hosts)) for i in range(hosts)]


@dataclass(frozen=True)
class PairMode:
    kind: str  # all | ring | sample
    rounds_drawn: int = 0  # sample:K


def parse_pair_mode(text: str) -> PairMode:
    """``all``, ``ring`` or ``sample:K`` (K >= 1); ValueError with the accepted forms otherwise."""
    value = text.strip().lower()
    if value in ("all", "ring"):
        return PairMode(value)
    kind, _, count = value.partition(":")
    if kind == "sample" and count.isdigit() and int(count) >= 1:
        return PairMode("sample", int(count))
    raise ValueError(f"--pairs {text!r} is not all, ring or sample:K (K a whole number >= 1)")


def schedule(hosts: int, mode: PairMode = PairMode("all"), seed: int = 0) -> list[list[Pair]]:
    """The rounds of pairs to measure for ``hosts`` hosts under ``mode``."""
    if mode.kind == "all":
        return round_robin(hosts)
    ring = ring_pairs(hosts)
    if mode.kind == "ring":
        return into_rounds(ring)
    if mode.kind != "sample":
        raise ValueError(f"unknown pair mode {mode.kind!r}")
    rng = random.Random(seed)
    shuffled = list(range(hosts))
    rng.shuffle(shuffled)
    full = round_robin(hosts)
    drawn = rng.sample(full, min(mode.rounds_drawn, len(full)))
    seen = set(ring)
    extra_rounds: list[list[Pair]] = []
    for pairs in drawn:
        mapped = [(min(shuffled[a], shuffled[b]), max(shuffled[a], shuffled[b])) for a, b in pairs]
        fresh = [p for p in mapped if p not in seen]
        seen.update(fresh)
        if fresh:
            extra_rounds.append(fresh)
    return into_rounds(ring) + extra_rounds


def sample_coverage(hosts: int, rounds_drawn: int) -> float:
    """Probability that ``sample:K`` measures one given pair off the ring (each pair lies in one round of the full schedule)."""
    total = len(round_robin(hosts))
    return min(1.0, rounds_drawn / total) if total else 0.0


# --- judgement -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SlowLink:
    a: int
    b: int
    bandwidth: float  # bytes/s
    median: float  # of the links judged healthy
    memcpy_fraction: Optional[float]  # the link over the slower end's memcpy bandwidth, when known


@dataclass(frozen=True)
class SlowHost:
    host: int
    bandwidth: float  # the median of its links
    median: float  # of all links
    links: int  # its measured links; ``median`` is that of the links judged healthy


@dataclass(frozen=True)
class SlowMemory:
    host: int
    memcpy: float
    median: float


@dataclass(frozen=True)
class Judgement:
    median_link: Optional[float]  # of the links judged healthy (of all, when none is)
    slow_links: list[SlowLink] = field(default_factory=list)
    slow_hosts: list[SlowHost] = field(default_factory=list)
    slow_memory: list[SlowMemory] = field(default_factory=list)
    note: str = ""  # why nothing could be compared (too few links)

    @property
    def healthy(self) -> bool:
        return not (self.slow_links or self.slow_hosts or self.slow_memory)


def judge(links: Mapping[Pair, float], memcpy: Optional[Mapping[int, float]] = None,
          slow_fraction: float = SLOW_FRACTION) -> Judgement:
    """Name the links and hosts far below the others. ``links``: measured bandwidth per pair (a < b); ``memcpy``: each
    host's own memcpy bandwidth (optional)."""
    memcpy = dict(memcpy or {})
    slow_memory = _slow_memory(memcpy, slow_fraction)
    if len(links) < 3:
        note = "fewer than 3 links measured: no median to compare a link with"
        return Judgement(statistics.median(links.values()) if links else None, slow_memory=slow_memory, note=note)
    per_host = _links_per_host(links)
    reference = healthy_reference(links, per_host)
    slow = {pair for pair, value in links.items() if value < slow_fraction * reference}
    median = statistics.median(links.values())
    candidates = _hosts_behind(slow, per_host, badness=lambda h: -statistics.median(links[p] for p in per_host[h]))
    # the sentences compare with the median of the links judged healthy: with a slow host among four, half the links
    # are slow and the median of all of them lies between the two groups
    healthy = [value for pair, value in links.items() if pair not in slow]
    median = statistics.median(healthy) if healthy else median
    hosts = [SlowHost(h, statistics.median(links[p] for p in per_host[h]), median, len(per_host[h])) for h in sorted(candidates)]
    named_links = []
    for a, b in sorted(slow):
        if a in candidates or b in candidates:
            continue
        ends = [memcpy[h] for h in (a, b) if memcpy.get(h)]
        named_links.append(SlowLink(a, b, links[(a, b)], median, links[(a, b)] / min(ends) if ends else None))
    return Judgement(median, named_links, hosts, slow_memory)


def healthy_reference(links: Mapping[Pair, float], per_host: Mapping[int, list[Pair]]) -> float:
    """What a healthy link measures: the median over hosts of each host's fastest link. The median of all links fails
    when faults touch most of them (two bad hosts among four touch five of the six links: the median is a bad link and
    nothing is below half of it); a host's fastest link is healthy as long as one of its peers is, so this holds while
    fewer than half the hosts are bad."""
    return statistics.median(max(links[p] for p in pairs) for pairs in per_host.values())


def _links_per_host(links: Iterable[Pair]) -> dict[int, list[Pair]]:
    per_host: dict[int, list[Pair]] = {}
    for pair in links:
        for host in pair:
            per_host.setdefault(host, []).append(pair)
    return per_host


def _hosts_behind(bad: set[Pair], per_host: Mapping[int, list[Pair]], badness, weak: Optional[set[Pair]] = None) -> set[int]:
    """The hosts that explain the ``bad`` links: every one of a host's (at least two) links is bad, or, given ``weak``
    (the links that show the fault below its line, a superset of ``bad``), at least two and more than half of its links
    are bad and every other one is weak. A candidate whose every link goes to another candidate is explained by its
    peers (ring: a good host between two bad ones); such hosts are dropped one at a time, the least bad first (lowest
    ``badness(host)``), while they stay explained."""
    candidates = {h for h, pairs in per_host.items() if _behind(pairs, bad, weak)}
    for host in sorted(candidates, key=badness):
        others = candidates - {host}
        if all((p[0] if p[1] == host else p[1]) in others for p in per_host[host]):
            candidates = others
    return candidates


def _behind(pairs: Sequence[Pair], bad: set[Pair], weak: Optional[set[Pair]]) -> bool:
    """A host's links ``pairs`` point at the host: at least two, all bad; or (``weak`` given) at least two and more than
    half bad, the rest weak."""
    count = sum(p in bad for p in pairs)
    if len(pairs) < 2 or count < 2:
        return False
    if count == len(pairs):
        return True
    return weak is not None and 2 * count > len(pairs) and all(p in bad or p in weak for p in pairs)


def _slow_memory(memcpy: Mapping[int, float], slow_fraction: float) -> list[SlowMemory]:
    if len(memcpy) < 3:
        return []
    median = statistics.median(memcpy.values())
    return [SlowMemory(h, v, median) for h, v in sorted(memcpy.items()) if v < slow_fraction * median]


RETRANSMIT_NOTABLE = 0.01  # a host that lost more than 1% of its TCP segments during the pairs lost packets
RETRANSMIT_MIN = 10  # and at least this many: a single retransmission among a few hundred segments is not a pattern
# A host that drops a share of its packets does not lose that share on every link of a short test: its TCP backs off
# differently per peer, and a CI machine's load moves the figures. Measured (tests/live/test_hosts_netns.py, node4 dropping 10%
# of its packets by nft): its links lost 0.8% to 17.8%; the 0.8% (184 of 23,117 segments) fell under RETRANSMIT_NOTABLE.
# A healthy link loses at most 0.2% here (0.002% to 0.04% on veth once D-SACKs are read; 0.13% on a loaded 2-node Slurm
# veth). A link above DIP_FLOOR, under the lossy line, still shows its host's loss when most of the host's links are lossy.
DIP_FLOOR = RETRANSMIT_NOTABLE / 4


# A retransmission is not a lost segment. TCP also retransmits what was only late or out of order: a tail loss probe
# fires after about two round trips without an ACK (RFC 8985; on a veth a round trip is tens of microseconds, so a
# receiver without a CPU for a few milliseconds is enough), an RTO after 200 ms, RACK after a reordering window, and a
# veth delivers each packet through the backlog of the CPU its sender happens to run on (net/core/dev.c netif_rx), so a
# sender moved between CPUs reorders its own stream. The receiver of such a duplicate says so with a D-SACK (RFC 2883,
# net/ipv4/tcp_input.c tcp_send_dupack / tcp_dsack_set), and the sender counts the duplicated segments in tcpi_dsack_dups
# (include/uapi/linux/tcp.h: "RFC4898 tcpEStatsStackDSACKDups"; tcp_dsack_seen ignores a D-SACK naming more segments
# than were retransmitted) and TcpExt TCPDSACKRecvSegs. What a D-SACK answered arrived twice: it was not lost. A packet
# dropped on the way (a firewall rule, a full queue, a bad cable) never arrives, and its retransmission gets no D-SACK.


def lost(retransmitted: int, spurious: int = 0) -> int:
    """The retransmitted segments that were lost: those the peer did not report back as duplicates (``spurious``, its
    D-SACKs), never below 0 nor above ``retransmitted``. Pure."""
    return max(0, retransmitted - min(max(0, spurious), retransmitted))


def lossy(sent: int, retransmitted: int, spurious: int = 0) -> bool:
    """A link (or host) that lost packets: of its ``sent`` segments, more than RETRANSMIT_NOTABLE and at least
    RETRANSMIT_MIN were retransmitted without the peer reporting a duplicate (``spurious``: see lost)."""
    gone = lost(retransmitted, spurious)
    return sent > 0 and gone >= RETRANSMIT_MIN and gone / sent > RETRANSMIT_NOTABLE


def shows_loss(sent: int, retransmitted: int, spurious: int = 0) -> bool:
    """A link that lost more than DIP_FLOOR of its ``sent`` segments (``spurious``: see lost): below the lossy line
    perhaps, but no healthy link's figure; it shows the loss of a host most of whose links are lossy. Pure."""
    return sent > 0 and lost(retransmitted, spurious) / sent > DIP_FLOOR


@dataclass(frozen=True)
class LossyLink:
    a: int
    b: int
    sent: int  # TCP segments both ends sent while the pair was measured
    retransmitted: int
    spurious: int = 0  # of the retransmitted, those the other end reported as duplicates (D-SACK): not lost

    @property
    def lost(self) -> int:
        return lost(self.retransmitted, self.spurious)


@dataclass(frozen=True)
class LossyHost:
    host: int
    sent: int  # over its measured links
    retransmitted: int
    links: int
    spurious: int = 0
    lossy_links: Optional[int] = None  # of its links, those over the lossy line, when not every one (the rest over DIP_FLOOR)

    @property
    def lost(self) -> int:
        return lost(self.retransmitted, self.spurious)


@dataclass(frozen=True)
class LossJudgement:
    lossy_links: list[LossyLink] = field(default_factory=list)
    lossy_hosts: list[LossyHost] = field(default_factory=list)
    healthy_sent: int = 0  # the segments of the links neither lossy nor of a lossy host, how many were retransmitted, and lost
    healthy_retransmitted: int = 0
    healthy_lost: int = 0


Counts = tuple  # (sent, retransmitted) or (sent, retransmitted, spurious)


def _three(value: Counts) -> tuple[int, int, int]:
    sent, retransmitted, *rest = value
    return int(sent), int(retransmitted), int(rest[0] or 0) if rest else 0


def judge_loss(counts: Mapping[Pair, Counts], explained: Iterable[Pair] = ()) -> LossJudgement:
    """Name the links and hosts that lose packets, from the TCP segments (sent, retransmitted[, spurious]) both ends of
    each pair counted while that pair alone was measured (a host is in one pair per round, and its network namespace's
    counters, /proc/net/snmp, are its own). ``spurious``: the retransmissions the other end reported as duplicates
    (D-SACK), which were not lost (see lost). Loss is judged absolutely (a healthy link loses nothing), not against the
    median. A host is named when at least two and more than half of its links are lossy, every other link of it still
    lost more than DIP_FLOOR (shows_loss: a lossy host's link that dipped under the line), and its lossy links are not
    all explained by lossy peers, as for slow hosts; a lossy link is named on its own when neither end is such a host.
    A host with two links (three hosts, a ring) is named only when both are lossy; a host with a link that lost no more
    than a healthy one is not named (one bad cable beside a lossy host, a healthy host between two lossy ones: that
    link says it is healthy), so a lossy host whose link dipped under DIP_FLOOR is named by its lossy links.
    ``explained``: pairs already accounted for (one that never answered retransmits into the void), left out here."""
    explained = set(explained)
    counts3 = {pair: _three(value) for pair, value in counts.items() if pair not in explained}
    bad = {pair for pair, (sent, retransmitted, spurious) in counts3.items() if lossy(sent, retransmitted, spurious)}
    weak = {pair for pair, (sent, retransmitted, spurious) in counts3.items() if shows_loss(sent, retransmitted, spurious)}
    per_host = _links_per_host(counts3)

    def rate(pair: Pair) -> float:
        sent, retransmitted, spurious = counts3[pair]
        return lost(retransmitted, spurious) / sent if sent else 0.0

    def total(pairs: Iterable[Pair]) -> tuple[int, int, int]:
        rows = [counts3[p] for p in pairs]
        return sum(r[0] for r in rows), sum(r[1] for r in rows), sum(r[2] for r in rows)

    hosts = _hosts_behind(bad, per_host, badness=lambda h: statistics.median(rate(p) for p in per_host[h]), weak=weak)
    named_hosts = []
    for h in sorted(hosts):
        sent, retransmitted, spurious = total(per_host[h])
        over = sum(p in bad for p in per_host[h])
        named_hosts.append(LossyHost(h, sent, retransmitted, len(per_host[h]), spurious, over if over < len(per_host[h]) else None))
    named_links = [LossyLink(a, b, *counts3[(a, b)]) for a, b in sorted(bad) if a not in hosts and b not in hosts]
    rest = [p for p in counts3 if p not in bad and p[0] not in hosts and p[1] not in hosts]
    sent, retransmitted, spurious = total(rest)
    return LossJudgement(named_links, named_hosts, sent, retransmitted, sum(lost(counts3[p][1], counts3[p][2]) for p in rest))


def slow_margin(bandwidth: float, reference: float, slow_fraction: float = SLOW_FRACTION) -> float:
    """How many times below the slow line (``slow_fraction`` of the healthy ``reference``) ``bandwidth`` lies: above 1
    for a slow link. Pure."""
    line = slow_fraction * reference
    return line / bandwidth if bandwidth > 0 else float("inf")


def loss_margin(sent: int, retransmitted: int, spurious: int = 0) -> float:
    """How many times above RETRANSMIT_NOTABLE the share of lost segments lies: above 1 for a lossy link. Pure."""
    return lost(retransmitted, spurious) / sent / RETRANSMIT_NOTABLE if sent > 0 else 0.0


def one_cause(slow: Judgement, loss: LossJudgement, links: Mapping[Pair, float], counts: Optional[Mapping[Pair, Counts]] = None,
              slow_fraction: float = SLOW_FRACTION) -> tuple[Judgement, LossJudgement]:
    """Links named for a fault their end host is already named for, taken out. Slowness and loss come together: a rate
    limit (a shaper, a policer) drops what exceeds its rate, and a path that loses packets is slow while TCP recovers
    them. A link named slow whose end is a host named lossy, and whose own segments show that loss (``shows_loss``: more
    than DIP_FLOOR lost, the figure by which judge_loss counts a link of a lossy host as part of its loss), is that host's loss; a link named lossy whose end is a host named slow, and whose own bandwidth lies below the slow line, is
    that host's slowness. A HOST that both judgements name keeps both: which of the two is the cause cannot be told from
    bandwidth and loss alone (measured on veth, tests/live/test_hosts_netns.py: a host dropping 10% of its packets ran 20 times
    below the slow line on one machine and 1.4 times on another, so comparing the two margins named it slow on the first;
    the tbf host lost 4% to 39%), and both are true. ``links``: the bandwidths ``slow`` was judged on; ``counts``: the
    pairs' (sent, retransmitted[, spurious]) loss was judged on. Pure."""
    if not (slow.slow_links or loss.lossy_links) or len(links) < 3:
        return slow, loss
    reference = healthy_reference(links, _links_per_host(links))
    counts3 = {pair: _three(value) for pair, value in (counts or {}).items()}
    slow_hosts, lossy_hosts = {h.host for h in slow.slow_hosts}, {h.host for h in loss.lossy_hosts}

    def losing(pair: Pair) -> bool:
        return pair in counts3 and shows_loss(*counts3[pair])

    def behind(pair: Pair) -> bool:
        return pair in links and slow_margin(links[pair], reference, slow_fraction) > 1.0

    kept_slow_links = [link for link in slow.slow_links
                       if not (losing((link.a, link.b)) and (link.a in lossy_hosts or link.b in lossy_hosts))]
    kept_lossy_links = [link for link in loss.lossy_links
                        if not (behind((link.a, link.b)) and (link.a in slow_hosts or link.b in slow_hosts))]
    kept_slow = Judgement(slow.median_link, kept_slow_links, slow.slow_hosts, slow.slow_memory, slow.note)
    kept_loss = LossJudgement(kept_lossy_links, loss.lossy_hosts, loss.healthy_sent, loss.healthy_retransmitted, loss.healthy_lost)
    return kept_slow, kept_loss


DSACK_UNKNOWN = "every retransmission counted as lost: this kernel does not count D-SACKs (Linux 4.19+)"


def loss_cause(sent: int, retransmitted: int, spurious: int = 0, dsack_unknown: bool = False) -> Optional[str]:
    """The likely cause a host's TCP counters show (/proc/net/snmp and TcpExt over the pair tests), or None.
    ``dsack_unknown``: the host's kernel did not count D-SACKs (``spurious`` is then 0), which the sentence says."""
    gone = lost(retransmitted, spurious)
    if sent <= 0 or gone / sent <= RETRANSMIT_NOTABLE:
        return None
    unknown = f" ({DSACK_UNKNOWN})" if dsack_unknown else ""
    return (f"TCP lost {gone} of {sent} segments ({gone / sent:.1%}){_spurious_note(retransmitted, spurious)}{unknown}: packets are lost or dropped on the way "
            "(a rate limit or full queue, a firewall rule, a bad cable; check tc qdisc show, nft list ruleset, ip -s link)")


def _spurious_note(retransmitted: int, spurious: int) -> str:
    """`` (1200 retransmitted, 40 of them arrived after all: D-SACK)`` where some retransmissions were not lost."""
    return f" ({retransmitted} retransmitted, {spurious} of them arrived after all: D-SACK)" if spurious else ""


def _most_common(values: Iterable[Optional[int]]) -> Optional[int]:
    known = [v for v in values if v is not None]
    if not known:
        return None
    counts = {v: known.count(v) for v in known}
    best = max(counts.values())
    return min(v for v, c in counts.items() if c == best) if list(counts.values()).count(best) == 1 else None


def interface_causes(facts: Sequence[Optional[InterfaceFacts]], named: Iterable[int], command: str = "") -> dict[int, list[str]]:
    """The causes each named host's interface shows, against the other hosts (``facts``: per host, its interface
    toward the master, MTU, link speed in Mb/s and GLOO_SOCKET_IFNAME, each None where unknown): an MTU that differs
    from the one most hosts have (large packets dropped or fragmented between them), a link slower than most hosts',
    GLOO_SOCKET_IFNAME naming another interface than the one toward the master. ``command``: the run's compat env
    command (CclRun.env_command: --python, --launcher), which the GLOO_SOCKET_IFNAME cause names with --master-addr. Pure."""
    from ..launchers.interface import compat_env_command
    from .oneccl_causes import with_arguments

    told = with_arguments(command, " --master-addr MASTER") if command else compat_env_command("", None, " --master-addr MASTER")
    from .protocol import InterfaceFacts

    rows = [f if isinstance(f, InterfaceFacts) else InterfaceFacts() for f in facts]
    mtu = _most_common(r.mtu for r in rows)
    speed = _most_common(r.speed for r in rows)
    causes: dict[int, list[str]] = {}
    for host in sorted(set(named)):
        if not 0 <= host < len(rows):
            continue
        row, found = rows[host], []
        interface = row.interface or "its interface"
        if mtu is not None and row.mtu is not None and row.mtu != mtu:
            found.append(f"MTU {row.mtu} on {interface} while most hosts have {mtu}: packets larger than the smaller MTU are dropped "
                         "or fragmented between them (set the same MTU on every host and switch port: ip link set dev IFACE mtu N)")
        if speed is not None and row.speed is not None and row.speed < speed:
            found.append(f"{interface} links at {row.speed} Mb/s while most hosts link at {speed} Mb/s (ethtool {interface}: speed, duplex; the cable or port)")
        if row.gloo_ifname and row.interface and row.gloo_ifname != row.interface:
            found.append(f"GLOO_SOCKET_IFNAME={row.gloo_ifname} but the route to the master leaves over {row.interface}: gloo's traffic takes "
                         f"another way (export GLOO_SOCKET_IFNAME={row.interface}, or {told})")
        if found:
            causes[host] = found
    return causes


def gbps(value: float) -> str:
    return f"{value / 1e9:.3g} GB/s"


def describe(judgement: Judgement, names: Sequence[str]) -> list[str]:
    """One sentence per slow thing, naming hosts by ``names`` (e.g. ``node3 <-> node7: 0.05 GB/s, median 1.1 GB/s``)."""
    lines = []
    for host in judgement.slow_hosts:
        lines.append(f"{names[host.host]}: every link slow, median {gbps(host.bandwidth)} over {host.links} links "
                     f"against a median of {gbps(host.median)} for the healthy links (its NIC, cable or switch port)")
    for link in judgement.slow_links:
        extra = f", {link.memcpy_fraction:.2%} of the hosts' memcpy" if link.memcpy_fraction is not None else ""
        lines.append(f"{names[link.a]} <-> {names[link.b]}: {gbps(link.bandwidth)}, median {gbps(link.median)}{extra}")
    for memory in judgement.slow_memory:
        lines.append(f"{names[memory.host]}: memcpy {gbps(memory.memcpy)}, median host {gbps(memory.median)} (memory or CPU contention)")
    return lines


@dataclass(frozen=True)
class Silence:
    hosts: list[int] = field(default_factory=list)  # every one of its (at least two) pairs ended without an answer
    links: list[Pair] = field(default_factory=list)  # pairs without an answer where neither end is such a host


def judge_silence(pairs: Iterable[Pair], silent: Iterable[Pair]) -> Silence:
    """The hosts and links behind the pairs that did not answer within their deadline: always named, whatever the
    median (a pair without an answer has no bandwidth to compare)."""
    silent = set(silent)
    per_host = _links_per_host(set(pairs) | silent)
    hosts = _hosts_behind(silent, per_host, badness=lambda h: sum(p in silent for p in per_host[h]))
    return Silence(sorted(hosts), [p for p in sorted(silent) if p[0] not in hosts and p[1] not in hosts])


def describe_silence(silence: Silence, names: Sequence[str], deadline: Optional[float]) -> list[str]:
    within = f"within {deadline:g} s" if deadline else "within its deadline"
    lines = [f"{names[h]}: no answer {within} on any of its pairs (the host, its NIC or a firewall)" for h in silence.hosts]
    lines += [f"{names[a]} <-> {names[b]}: no answer {within}" for a, b in silence.links]
    return lines


def describe_loss(judgement: LossJudgement, names: Sequence[str], uncounted: Iterable[Pair] = ()) -> list[str]:
    """One sentence per host or link that lost packets (``node4: loses packets on every link: ...``). ``uncounted``:
    the pairs whose D-SACKs an end's kernel did not count; a host or link judged on one of them says so (DSACK_UNKNOWN)."""
    uncounted = set(uncounted)

    def told(judged: bool) -> str:
        return f" ({DSACK_UNKNOWN})" if judged else ""

    others = (f"{judgement.healthy_lost} of {judgement.healthy_sent} on the other links"
              if judgement.healthy_sent else "no other link measured")
    lines = []
    for host in judgement.lossy_hosts:
        where = ("every link" if host.lossy_links is None else
                 f"{host.lossy_links} of its {host.links} links and more than {DIP_FLOOR:.2%} on the {'other' if host.links - host.lossy_links == 1 else 'others'}")
        lines.append(f"{names[host.host]}: loses packets on {where}: TCP lost {host.lost} of {host.sent} segments "
                     f"({host.lost / host.sent:.1%}) over its {host.links} links{_spurious_note(host.retransmitted, host.spurious)}{told(any(host.host in pair for pair in uncounted))}, {others}")
    for link in judgement.lossy_links:
        lines.append(f"{names[link.a]} <-> {names[link.b]}: loses packets: TCP lost {link.lost} of {link.sent} segments "
                     f"({link.lost / link.sent:.1%}){_spurious_note(link.retransmitted, link.spurious)}{told((link.a, link.b) in uncounted)}, {others}")
    return lines


# --- the deadline: the pairs first, then a sweep sized to the slowest link ---------------------------------------------

FABRIC_DEADLINE_S = 60.0  # --fabric-deadline's default: 4 hosts here end in under 2 minutes in all (start 25-35 s, pairs and sweep, Trainer step 8 s)
PAIRS_SHARE = 0.4  # of the deadline, at most, for the pair rounds (a pair that never answers costs its deadline, each round)
PAIR_DEADLINE_FLOOR = 3.0  # a pair deadline below this names a healthy pair silent while its group is still forming
SWEEP_MARGIN = 0.85  # the sweep plans to fill this share of what is left: the estimates are a model, the clock is not
SWEEP_CASE_FLOOR = 0.1  # the least time a case's timed calls get (fewer messages) before whole sizes go
CALL_OVERHEAD_S = 0.002  # one collective call beside its bytes: the barrier before it, the check after it, a thread's wake-up
CHECK_RATE = 150e6  # bytes/s a rank checks and prepares its buffers at (float64 copies of the result; a shared core)
DTYPES = ("fp32", "bf16")


def pair_deadline_under(deadline: float, rounds: int, pair_deadline: float) -> float:
    """The deadline each pair gets under the run's ``deadline``: the asked ``pair_deadline``, lowered so that every round
    ending at its deadline (a silent host) still takes at most PAIRS_SHARE of the whole, never below PAIR_DEADLINE_FLOOR."""
    if rounds <= 0:
        return pair_deadline
    return max(min(pair_deadline, PAIR_DEADLINE_FLOOR), min(pair_deadline, PAIRS_SHARE * deadline / rounds))


def call_seconds(collective: str, size: int, world: int, link: Optional[float]) -> float:
    """One call of ``collective`` at ``size`` bytes (nccl-tests' S) on ``world`` ranks whose slowest link moves ``link``
    bytes/s: the bus bytes (S x bus factor, what each rank's link carries in a ring) over the link, plus the overhead."""
    moved = size * bus_factor(collective, max(2, world))
    return CALL_OVERHEAD_S * max(1, world - 1) + (moved / link if link else 0.0)


def case_seconds(collective: str, size: int, world: int, link: Optional[float], timed: float) -> tuple[float, int]:
    """(seconds, timed calls) of one sweep case as the worker runs it: a warm-up, then as many timed calls as fit in
    ``timed`` seconds (1 to sweep_iterations), each call prepared and checked (CHECK_RATE) and the case's buffers made."""
    call = call_seconds(collective, size, world, link)
    calls = max(1, min(case_iterations(size), int(timed / max(call, 1e-9))))
    check = size * 2 / CHECK_RATE
    return (calls + 1) * (call + check) + size * max(2, world) / CHECK_RATE + 3 * CALL_OVERHEAD_S * max(1, world - 1), calls


def case_iterations(size: int) -> int:
    """The most timed calls of a case (the worker's sweep_iterations)."""
    return 20 if size <= 64 << 10 else 10 if size <= 1 << 20 else 5 if size <= 16 << 20 else 3


@dataclass(frozen=True)
class PlannedCase:
    collective: str
    dtype: str
    size: int
    calls: int  # timed calls the model expects (the worker still decides from its warm-up)
    seconds: float  # the model's estimate of the whole case


@dataclass(frozen=True)
class Skipped:
    collective: str
    dtype: str
    sizes: tuple[int, ...]
    why: str  # "slow link": one call over the slowest link would take more than the stop time; "deadline": no room left


@dataclass(frozen=True)
class SweepPlan:
    cases: tuple[PlannedCase, ...]
    skipped: tuple[Skipped, ...]
    timed: float  # seconds of timed calls per case (SWEEP_CASE_SECONDS, or fewer under the deadline)
    budget: float
    estimate: float  # the model's seconds for the cases kept

    def sizes(self, collective: str, dtype: str) -> list[int]:
        return [case.size for case in self.cases if case.collective == collective and case.dtype == dtype]


def plan_sweep(sizes: Sequence[int], world: int, budget: float, link: Optional[float], collectives: Sequence[str] = COLLECTIVES,
               dtypes: Sequence[str] = DTYPES, timed: float = 1.0, stop: float = 2.0) -> SweepPlan:
    """The sweep that fits in ``budget`` seconds when the slowest link measured moves ``link`` bytes/s (None: unknown,
    nothing cut for the link). Pure. In this order, until the model's estimate fits:
    1. sizes whose one call through that link takes more than ``stop`` seconds go (the worker's cut rule, decided ahead);
    2. fewer timed calls per case: ``timed`` halved down to SWEEP_CASE_FLOOR;
    3. the largest remaining size goes, for every collective and type at once (smaller messages), down to the smallest;
    4. then whole cases from the end (bf16 before fp32, the last collectives first): all_reduce fp32 at the smallest
       size is kept whatever the budget (one case: the world still has to be checked once).
    Every size left out is in ``skipped`` with why."""
    ordered = sorted(set(int(s) for s in sizes))
    skipped: list[Skipped] = []
    kept: dict[tuple[str, str], list[int]] = {}
    for name in collectives:
        for dtype in dtypes:
            fits = [s for s in ordered if call_seconds(name, s, world, link) <= stop] or ordered[:1]
            if len(fits) < len(ordered):
                skipped.append(Skipped(name, dtype, tuple(s for s in ordered if s not in fits), "slow link"))
            kept[(name, dtype)] = fits

    def estimate(seconds_timed: float) -> float:
        return sum(case_seconds(n, s, world, link, seconds_timed)[0] for (n, _), group in kept.items() for s in group)

    while estimate(timed) > budget and timed > SWEEP_CASE_FLOOR:
        timed = max(SWEEP_CASE_FLOOR, timed / 2)
    dropped: dict[tuple[str, str], list[int]] = {key: [] for key in kept}
    while estimate(timed) > budget:
        largest = max((group[-1] for group in kept.values() if len(group) > 1), default=None)
        if largest is None:
            break
        for key, group in kept.items():
            if len(group) > 1 and group[-1] == largest:
                dropped[key].insert(0, group.pop())
    order = [(n, d) for d in reversed(list(dtypes)) for n in reversed(list(collectives))]  # bf16 first, the last collective first
    for key in order:
        if estimate(timed) <= budget:
            break
        if key == (collectives[0], dtypes[0]):
            continue
        dropped[key] = kept[key] + dropped[key]
        kept[key] = []
    for key, group in dropped.items():
        if group:
            skipped.append(Skipped(key[0], key[1], tuple(group), "deadline"))
    cases = []
    for name in collectives:
        for dtype in dtypes:
            for size in kept[(name, dtype)]:
                seconds, calls = case_seconds(name, size, world, link, timed)
                cases.append(PlannedCase(name, dtype, size, calls, seconds))
    merged: dict[tuple[str, str, str], list[int]] = {}
    for item in skipped:
        merged.setdefault((item.collective, item.dtype, item.why), []).extend(item.sizes)
    skipped = [Skipped(n, d, tuple(sorted(s)), why) for (n, d, why), s in merged.items()]
    rank = {key: i for i, key in enumerate((n, d) for n in collectives for d in dtypes)}
    skipped.sort(key=lambda item: (rank[(item.collective, item.dtype)], item.why))
    return SweepPlan(tuple(cases), tuple(skipped), timed, budget, sum(case.seconds for case in cases))


def slowest_link(links: Sequence[Mapping[str, object]]) -> Optional[tuple[int, int, float]]:
    """(a, b, bytes/s) of the slowest link that answered (its slower direction), from the pair table the ranks share;
    None when no pair answered."""
    best = None
    for link in links:
        if link.get("error") is not None:
            continue
        try:
            rate = min(float(link["out"]), float(link["back"]))  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            continue
        if rate > 0 and (best is None or rate < best[2]):
            best = (int(link["a"]), int(link["b"]), rate)  # type: ignore[call-overload]
    return best


def describe_skipped(skipped: Sequence[Mapping[str, object]], size_text) -> list[str]:
    """One line per collective and type the deadline or the slow link left sizes out of (the sweep's JSON ``skipped``)."""
    lines = []
    for item in skipped:
        sizes = list(item["sizes"])  # type: ignore[call-overload]
        backend = f"{item['backend']}: " if item.get("backend") else ""
        shown = ", ".join(size_text(int(s)) for s in sizes[:6]) + (f" and {len(sizes) - 6} more" if len(sizes) > 6 else "")
        why = {"slow link": "one call over the slowest link would take more than the stop time",
               "deadline": "no room left under --fabric-deadline"}.get(str(item["why"]), str(item["why"]))
        lines.append(f"not measured: {backend}{item['collective']} {item['dtype']} at {shown} ({why})")
    return lines
