"""The broker's decisions, without I/O: who holds which device, who waits, who must evict.

Every method takes the current time and returns the messages to send (``Event``s);
the gRPC server only delivers them. Keeping the state machine pure lets the
property test drive it through random interleavings and check its invariants.

Rules:
- A request asks for ``count`` devices as a gang: granted all at once or not at all.
  With ``per_node`` k (devices know their node: a broker lending a multi-node job's
  GPUs) the gang is ``count / k`` groups of k devices, each group on one node and no
  two on the same node; the grant lists the groups in the broker's node order. A
  model served by one process asks ``per_node = count`` (all its devices on one
  node); a model of N processes, one per node, asks ``count / N``.
- Requests are served in arrival order (FIFO); the head of the queue is never passed
  by a later request, so nobody starves behind a stream of small requests.
- With ``backfill``: while the head waits for devices a lease holds, later requests
  that can be placed at once on free devices get them (a backfill lease), so free
  devices do not idle behind a head that needs more. The head is not starved: its
  devices are chosen (``_reserve``); once the only leases still holding them are
  backfill leases, those are asked to yield and no other request gets one of them.
  A backfill never asks the head's resident memory to be evicted. Unless the head is
  stalled: a lease holding one of its devices was asked to yield ``overdue`` seconds
  ago (the quantum, at least 1 s) and still holds it (a hung model's lease is held
  until its hang is declared, tens of seconds later). Then the head's free devices, and
  its resident memory on them, go to backfills meanwhile (each asked to yield at
  once): a hung model never stalls the models on other devices.
- A device is leased to at most one client at a time.
- A client may leave data on a device after releasing it (it is "resident"). Before a
  device is granted, residents of other clients are asked to evict until the
  request's memory fits (``memory == 0`` means the whole device); the grant waits
  for their ``evict_done``.
- Policy ``quantum``: when the queue head waits for a device held longer than the
  quantum, the holder is asked once per lease to yield.
- A disconnect frees the client's leases, requests and residency at once.
- Recovery (after the previous broker on the same socket died without a clean stop):
  nothing is granted until every session of the previous broker is back
  (``rejoin``, declaring what it still holds on which device as resident memory) or
  the grace period ends. From then on the declared residents are asked to evict like
  any other before their devices go to someone who needs the memory.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from acbslurm.errors import ConfigError
from acbslurm.values import field, frozen, mutable

POLICIES = ("fifo", "quantum")


@frozen
class Device:
    """A device a broker lends, as the broker and its clients' leases know it: a GPU
    (``id`` its UUID) or a CPU stand-in (``cpuN``). The hardware record it is made from
    is ``gpu.inventory.GpuInfo``; a job's GPU as the hooks record it is ``gpuvalue.Gpu``."""

    id: str
    name: str = ""
    memory_total: int = 0  # bytes; 0 = unknown (every request then needs the whole device)
    minor: int | None = None  # /dev/nvidiaN; None where not known (as in ``Gpu``)
    index: int | None = None  # the GPU's index on its node; None where not known
    node: str = ""  # the Slurm node it is on ("" = this broker's own node)


@frozen
class Granted:
    client: int
    request_id: int
    lease_id: int
    devices: tuple[str, ...]


@frozen
class Rejected:
    client: int
    request_id: int
    reason: str


@frozen
class YieldAsked:
    client: int
    lease_id: int


@frozen
class EvictAsked:
    client: int
    devices: tuple[str, ...]


Event = Granted | Rejected | YieldAsked | EvictAsked


@mutable
class Lease:
    lease_id: int
    client: int
    devices: tuple[str, ...]
    since: float
    yield_asked: bool = False
    asked_at: float = 0.0  # when it was asked to yield
    overdue: bool = False  # asked ``Broker.overdue`` seconds ago and still held (``tick``)
    backfill: bool = False  # granted past a waiting head: yields to it (``_backfill``)


@mutable
class Waiting:
    client: int
    request_id: int
    count: int
    memory: int
    pin: tuple[str, ...]
    since: float
    per_node: int = 0  # 0: anywhere; k: groups of k devices, each on one node


@mutable
class ClientInfo:
    client_id: int
    name: str
    pid: int
    leases: dict[int, Lease] = field(default_factory=dict)
    session: str = ""  # the client's own key; a rejoin after a broker restart repeats it
    rejoined: bool = False


@mutable
class Counters:
    grants: int = 0
    evictions: int = 0
    yields_asked: int = 0
    disconnects: int = 0
    backfills: int = 0  # grants past a waiting head


class Broker:
    def __init__(
        self,
        devices: list[Device],
        policy: str = "fifo",
        quantum: float = 1.0,
        backfill: bool = False,
    ) -> None:
        # Both come from what a user gives (a pool's policy:, a job's GPU list that names
        # one GPU twice), so they are the tree's ConfigError, not a bug's ValueError.
        if policy not in POLICIES:
            raise ConfigError(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")
        ids = [d.id for d in devices]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ConfigError(f"the broker's devices name {twice[0]!r} twice: {', '.join(ids)}")
        self.devices: dict[str, Device] = {d.id: d for d in devices}
        self.policy = policy
        self.quantum = quantum
        self.backfill = backfill
        # s a lease asked to yield may hold before the head waiting for it is stalled
        self.overdue = max(quantum, 1.0)
        self.clients: dict[int, ClientInfo] = {}
        self.queue: list[Waiting] = []
        self.holder: dict[str, Lease | None] = {d.id: None for d in devices}
        # device -> client -> bytes, in least-recently-released order (evicted first).
        self.resident: dict[str, OrderedDict[int, int]] = {d.id: OrderedDict() for d in devices}
        # device -> clients asked to evict that have not answered yet.
        self.evicting: dict[str, set[int]] = {d.id: set() for d in devices}
        self.counters = Counters()
        # Device-seconds of the leases that ended, per client name (who held the GPUs:
        # kept for the report by a job's broker, server.BrokerService.keep_usage).
        self.held: dict[str, float] = {}
        self._next_client = 1
        self._next_lease = 1
        # Recovery: no grants until the previous broker's sessions are back (``expected``
        # empties) or ``recovery_until``; ``expected`` None = unknown, wait the full grace.
        self.recovering = False
        self.recovery_until = 0.0
        self.expected: set[str] | None = None

    # -- recovery after an unclean stop --------------------------------------------------

    def start_recovery(self, expected: Iterable[str] | None, until: float) -> None:
        """Grant nothing until the sessions ``expected`` have rejoined, or until ``until``."""
        self.expected = None if expected is None else set(expected)
        self.recovering = True
        self.recovery_until = until
        if self.expected is not None and not self.expected:
            self.recovering = False

    def end_recovery(self, now: float) -> list[Event]:
        """The grace period is over (or everybody is back): granting resumes."""
        if not self.recovering:
            return []
        self.recovering = False
        self.expected = None
        return self._schedule(now)

    def rejoin(
        self,
        name: str,
        pid: int,
        session: str,
        resident: dict[str, int],
        now: float,
    ) -> tuple[int, list[Event]]:
        """A session of the previous broker registers again, declaring what it still holds.

        ``resident``: bytes it still has on each device (a device it was using when it
        lost the broker counts in full). Unknown devices are ignored.
        """
        cid = self.register(name, pid, session)
        self.clients[cid].rejoined = True
        for dev, nbytes in resident.items():
            if dev in self.devices and nbytes > 0:
                self.resident[dev][cid] = nbytes
        if self.recovering and self.expected is not None:
            self.expected.discard(session)
            if not self.expected:
                return cid, self.end_recovery(now)
        return cid, []

    def sessions(self) -> set[str]:
        """Keys of the sessions that may hold device memory (for the state file)."""
        keys = {c.session for c in self.clients.values() if c.session}
        if self.recovering and self.expected:
            keys |= self.expected
        return keys

    # -- client life -------------------------------------------------------------------

    def register(self, name: str, pid: int, session: str = "") -> int:
        cid = self._next_client
        self._next_client += 1
        self.clients[cid] = ClientInfo(cid, name, pid, session=session)
        return cid

    def disconnect(self, client: int, now: float) -> list[Event]:
        info = self.clients.pop(client, None)
        if info is None:
            return []
        self.counters.disconnects += 1
        for lease in info.leases.values():
            self._count(info.name, lease, now)
            for dev in lease.devices:
                self.holder[dev] = None
        self.queue = [w for w in self.queue if w.client != client]
        for dev in self.devices:
            self.resident[dev].pop(client, None)
            self.evicting[dev].discard(client)
        return self._schedule(now)

    # -- requests ----------------------------------------------------------------------

    def request(
        self,
        client: int,
        request_id: int,
        count: int,
        now: float,
        memory: int = 0,
        pin: tuple[str, ...] = (),
        per_node: int = 0,
    ) -> list[Event]:
        if client not in self.clients:
            return []
        reason = self._invalid(count, memory, pin) or self._invalid_spread(
            count, memory, pin, per_node
        )
        if reason:
            return [Rejected(client, request_id, reason)]
        if any(w.client == client and w.request_id == request_id for w in self.queue):
            return [Rejected(client, request_id, f"request {request_id} is already waiting")]
        self.queue.append(Waiting(client, request_id, count, memory, pin, now, per_node))
        return self._schedule(now)

    def _invalid_spread(self, count: int, memory: int, pin: tuple[str, ...], per_node: int) -> str:
        """Why a ``per_node`` request can never be granted ("" when it can)."""
        if per_node == 0:
            return ""
        if per_node < 0 or count % per_node:
            return f"per_node {per_node} does not divide count {count}"
        fitting = [d for d in pin or tuple(self.devices) if self._fits(self.devices[d], memory)]
        groups = sum(1 for devs in self._by_node(fitting).values() if len(devs) >= per_node)
        if groups < count // per_node:
            return (
                f"no {count // per_node} node(s) with {per_node} device(s) each "
                f"with {memory} bytes of memory"
            )
        return ""

    def _by_node(self, devices: Iterable[str]) -> dict[str, list[str]]:
        """``devices`` grouped by node, nodes and devices in the broker's order."""
        out: dict[str, list[str]] = {}
        for d in devices:
            out.setdefault(self.devices[d].node, []).append(d)
        return out

    def _invalid(self, count: int, memory: int, pin: tuple[str, ...]) -> str:
        candidates = list(pin) if pin else list(self.devices)
        unknown = [p for p in pin if p not in self.devices]
        if unknown:
            return f"unknown device(s): {', '.join(unknown)}"
        if count < 1:
            return f"count must be at least 1, got {count}"
        if count > len(candidates):
            where = "pinned devices" if pin else "devices on this broker"
            return f"asked for {count} device(s), only {len(candidates)} {where}"
        if memory < 0:
            return f"memory must not be negative, got {memory}"
        if self._fitting(candidates, memory) < count:
            return f"no {count} device(s) with {memory} bytes of memory"
        return ""

    def _fitting(self, candidates: list[str], memory: int) -> int:
        """How many of ``candidates`` have ``memory`` bytes."""
        return len([d for d in candidates if self._fits(self.devices[d], memory)])

    @staticmethod
    def _fits(dev: Device, memory: int) -> bool:
        return dev.memory_total == 0 or memory <= dev.memory_total

    def cancel(self, client: int, request_id: int, now: float) -> list[Event]:
        before = len(self.queue)
        self.queue = [
            w for w in self.queue if not (w.client == client and w.request_id == request_id)
        ]
        if len(self.queue) == before:
            return []  # already granted (or unknown): the grant stands
        # Answered so that a client can tell "cancelled" from "granted meanwhile".
        return [Rejected(client, request_id, "cancelled"), *self._schedule(now)]

    def release(
        self, client: int, lease_id: int, now: float, resident: dict[str, int] | None = None
    ) -> list[Event]:
        info = self.clients.get(client)
        if info is None:
            return []
        lease = info.leases.pop(lease_id, None)
        if lease is None:
            return []
        self._count(info.name, lease, now)
        for dev in lease.devices:
            self.holder[dev] = None
            self.resident[dev].pop(client, None)
            nbytes = (resident or {}).get(dev, 0)
            if nbytes > 0:
                self.resident[dev][client] = nbytes  # most recently used goes last
        return self._schedule(now)

    def _count(self, name: str, lease: Lease, now: float) -> None:
        seconds = len(lease.devices) * max(0.0, now - lease.since)
        self.held[name] = self.held.get(name, 0.0) + seconds

    def held_until(self, now: float) -> dict[str, float]:
        """Device-seconds per client name, the leases still held counted up to ``now``."""
        out = dict(self.held)
        for info in self.clients.values():
            for lease in info.leases.values():
                out[info.name] = out.get(info.name, 0.0) + len(lease.devices) * max(
                    0.0, now - lease.since
                )
        return out

    def evict_done(self, client: int, devices: tuple[str, ...], now: float) -> list[Event]:
        for dev in devices:
            if dev in self.devices:
                self.evicting[dev].discard(client)
                self.resident[dev].pop(client, None)
        return self._schedule(now)

    def tick(self, now: float) -> list[Event]:
        """End a recovery whose grace is over; ask holders to yield when the queue head
        has waited past the quantum."""
        if self.recovering and now >= self.recovery_until:
            return self.end_recovery(now)
        events = self._quantum_yields(now)
        if self._overdue_now(now) and self.backfill and not self.recovering:
            events.extend(self._schedule(now))  # the head stalled: backfills may go
        return events

    def _quantum_yields(self, now: float) -> list[Event]:
        if self.policy != "quantum" or not self.queue:
            return []
        head = self.queue[0]
        if now - head.since < self.quantum:
            return []
        events: list[Event] = []
        candidates = head.pin or tuple(self.devices)
        for dev in candidates:
            lease = self.holder[dev]
            # Another client's lease, held past the quantum and not asked yet.
            if (
                lease is not None
                and lease.client != head.client
                and not lease.yield_asked
                and now - lease.since >= self.quantum
            ):
                lease.yield_asked, lease.asked_at = True, now
                self.counters.yields_asked += 1
                events.append(YieldAsked(lease.client, lease.lease_id))
        return events

    def _overdue_now(self, now: float) -> bool:
        """Marks the leases that became overdue since the last look; whether any did."""
        found = False
        for lease in {id(h): h for h in self.holder.values() if h is not None}.values():
            if lease.yield_asked and not lease.overdue and now - lease.asked_at >= self.overdue:
                lease.overdue = found = True
        return found

    # -- scheduling --------------------------------------------------------------------

    def _schedule(self, now: float) -> list[Event]:
        """Grant from the head of the queue while its gang can be placed; then, with
        ``backfill``, to later requests that do not delay the head."""
        events: list[Event] = []
        while self.queue and not self.recovering:
            head = self.queue[0]
            chosen = self._place(head)
            if chosen is None or not self._clear(chosen, head, events):
                break
            self.queue.pop(0)
            events.append(self._grant(head, chosen, now))
        if self.backfill and len(self.queue) > 1 and not self.recovering:
            events.extend(self._backfill(now))
        return events

    def _grant(
        self, w: Waiting, chosen: tuple[str, ...], now: float, backfill: bool = False
    ) -> Granted:
        lease = Lease(self._next_lease, w.client, chosen, now, backfill=backfill)
        self._next_lease += 1
        for dev in chosen:
            self.holder[dev] = lease
        self.clients[w.client].leases[lease.lease_id] = lease
        self.counters.grants += 1
        return Granted(w.client, w.request_id, lease.lease_id, chosen)

    def _backfill(self, now: float) -> list[Event]:
        """The head waits: later requests that can be placed on free devices now get
        them. While a lease that is not a backfill still holds one of the head's
        devices, its free ones may be lent too (the head waits anyway); once only
        backfill leases hold them, these are asked to yield and the head's free devices
        are kept for it."""
        head = self.queue[0]
        events: list[Event] = []
        keep, stalled = self._keep_for(head, events, now)
        passed = {head.client}  # a client's requests stay in its own order
        for w in list(self.queue[1:]):
            chosen = None if w.client in passed else self._place(w, keep)
            # The head's resident memory stays: a backfill that needs it gone waits,
            # unless the head is stalled (it would wait anyway).
            spare = 0 if stalled else head.client
            if chosen is None or not self._clear(chosen, w, events, spare=spare):
                passed.add(w.client)
                continue
            self.queue.remove(w)
            self.counters.backfills += 1
            granted = self._grant(w, chosen, now, backfill=True)
            events.append(granted)
            if stalled and set(chosen) & set(self._reserve(head)):
                # on the stalled head's devices: its first batch only, then them back
                lease = self.clients[w.client].leases[granted.lease_id]
                events.extend(self._ask_to_yield([lease], head, now))
        return events

    def _keep_for(
        self, head: Waiting, events: list[Event], now: float
    ) -> tuple[frozenset[str], bool]:
        """The devices no backfill may have, and whether the head is stalled (a lease
        holding one of its devices is overdue: asked to yield long enough ago). None
        while a lease that is not a backfill holds one of the head's (it waits for that
        anyway) or while it is stalled; else all of the head's, and the backfills
        holding them are asked to yield (into ``events``)."""
        reserved = self._reserve(head)
        holders = {h.lease_id: h for d in reserved if (h := self.holder[d]) is not None}
        stalled = any(h.yield_asked and now - h.asked_at >= self.overdue for h in holders.values())
        if any(not h.backfill for h in holders.values()):
            return frozenset(), stalled
        events.extend(self._ask_to_yield(holders.values(), head, now))
        return (frozenset() if stalled else frozenset(reserved)), stalled

    def _clear(
        self, chosen: tuple[str, ...], w: Waiting, events: list[Event], spare: int = 0
    ) -> bool:
        """Residents in ``w``'s way on ``chosen`` asked to evict (into ``events``);
        whether ``w`` may have them now (no one else still evicting there). False, and
        nobody asked, when client ``spare`` (0: none; ids start at 1) is in the way."""
        asks = {dev: self._evictions_needed(dev, w) for dev in chosen}
        if spare and any(spare in victims for victims in asks.values()):
            return False
        for dev, victims in asks.items():
            for victim in victims:
                self.evicting[dev].add(victim)
                self.counters.evictions += 1
                events.append(EvictAsked(victim, (dev,)))
        return not any(self._others_evicting(d, w.client) for d in chosen)

    def _ask_to_yield(self, leases: Iterable[Lease], head: Waiting, now: float) -> list[Event]:
        """Each of ``leases`` (backfills holding the head's devices) asked once to yield."""
        events: list[Event] = []
        for lease in leases:
            if not lease.yield_asked and lease.client != head.client:
                lease.yield_asked, lease.asked_at = True, now
                self.counters.yields_asked += 1
                events.append(YieldAsked(lease.client, lease.lease_id))
        return events

    def _reserve(self, head: Waiting) -> tuple[str, ...]:
        """The devices the head will have: free ones first, then those held (by backfill
        leases before others), each kind placed as ``_place`` would."""

        def ready(dev: str) -> int:
            h = self.holder[dev]
            return 0 if h is None else 1 if h.backfill else 2

        return self._choose(head, self._fitting_for(head), ready) or ()

    def _place(self, w: Waiting, keep: frozenset[str] = frozenset()) -> tuple[str, ...] | None:
        """Free devices for ``w`` (none of ``keep``): its own residency first, then least
        occupied ones."""
        free = [d for d in self._fitting_for(w) if self.holder[d] is None and d not in keep]
        return self._choose(w, free)

    def _choose(
        self, w: Waiting, candidates: list[str], first: Callable[[str], int] = lambda _: 0
    ) -> tuple[str, ...] | None:
        """``w``'s gang among ``candidates``: by ``first``, then its own residency, then
        the least occupied; None when they cannot hold it."""
        if len(candidates) < w.count:
            return None
        order = {d: i for i, d in enumerate(self.devices)}

        def cost(dev: str) -> tuple[int, int, int, int]:
            mine = 0 if w.client in self.resident[dev] else 1
            others = sum(b for c, b in self.resident[dev].items() if c != w.client)
            return (first(dev), mine, others, order[dev])

        if w.per_node == 0:
            return tuple(sorted(candidates, key=cost)[: w.count])
        # Each node's best group, then the best nodes; listed in the broker's node order.
        groups = self._node_groups(candidates, w.per_node, cost)
        if len(groups) < w.count // w.per_node:
            return None

        def group_cost(g: list[str]) -> tuple[int, int, int, int]:
            c = [cost(d) for d in g]
            return (
                sum(x[0] for x in c),
                sum(x[1] for x in c),
                sum(x[2] for x in c),
                min(x[3] for x in c),
            )

        best = sorted(groups, key=group_cost)[: w.count // w.per_node]
        best.sort(key=lambda g: min(order[d] for d in g))
        return tuple(d for g in best for d in g)

    def _fitting_for(self, w: Waiting) -> list[str]:
        """The devices ``w`` may have (its pins, else all) that fit it, held or not."""
        return [d for d in (w.pin or tuple(self.devices)) if self._fits(self.devices[d], w.memory)]

    def _node_groups(
        self,
        candidates: list[str],
        per_node: int,
        cost: Callable[[str], tuple[int, int, int, int]],
    ) -> list[list[str]]:
        """Each node's ``per_node`` cheapest ``candidates``, of the nodes that have so many."""
        return [
            sorted(devs, key=cost)[:per_node]
            for devs in self._by_node(candidates).values()
            if len(devs) >= per_node
        ]

    def _evictions_needed(self, dev: str, w: Waiting) -> list[int]:
        """Residents of ``dev`` (oldest first) that must leave so that ``w`` fits."""
        others = self._other_residents(dev, w.client)
        total = self.devices[dev].memory_total
        if w.memory == 0 or total == 0:
            return [c for c, _ in others]
        pending = sum(self.resident[dev].get(c, 0) for c in self.evicting[dev])
        used = sum(b for _, b in others) + pending + self.resident[dev].get(w.client, 0)
        free = total - used
        out: list[int] = []
        for c, b in others:
            if free >= w.memory:
                break
            out.append(c)
            free += b
        return out

    def _other_residents(self, dev: str, client: int) -> list[tuple[int, int]]:
        """The residents of ``dev`` (client, bytes; oldest first) other than ``client``,
        not already evicting."""
        return [
            (c, b)
            for c, b in self.resident[dev].items()
            if c != client and c not in self.evicting[dev]
        ]

    def _others_evicting(self, dev: str, client: int) -> bool:
        return any(c != client for c in self.evicting[dev])

    # -- views -------------------------------------------------------------------------

    def waiting_for(self, client: int) -> list[Waiting]:
        return [w for w in self.queue if w.client == client]

    # complexity: a list of assertions, each naming its invariant; they share the owners map the
    # first loop builds, and a helper per invariant would pass it around for no reader's gain.
    def check_invariants(self) -> None:
        """Raise AssertionError when the state is inconsistent (used by tests)."""
        owners: dict[str, int] = {}
        for info in self.clients.values():
            # No device is leased twice, and each lease is its devices' holder.
            for lease in info.leases.values():
                assert lease.client == info.client_id
                for dev in lease.devices:
                    assert dev not in owners, f"{dev} leased to {owners[dev]} and {info.client_id}"
                    owners[dev] = info.client_id
                    assert self.holder[dev] is lease
        for dev, held in self.holder.items():
            # Each holder is its device's lease owner, and shares it with no resident
            # that still evicts.
            if held is not None:
                assert owners.get(dev) == held.client, f"stale holder on {dev}"
                assert not self._others_evicting(dev, held.client)
        for dev in self.devices:
            for c in self.resident[dev]:
                assert c in self.clients, f"resident {c} on {dev} is gone"
        for w in self.queue:
            assert w.client in self.clients
        if self.recovering:
            assert all(h is None for h in self.holder.values()), "granted during recovery"
