"""The network interfaces of this machine: which are up (what oneCCL's key-value store can bind to), and which one
reaches the master of a job across hosts (what GLOO_SOCKET_IFNAME, CCL_KVS_IFACE, FI_TCP_IFACE and the MPIs'
interface settings must name).

``route_facts(master)`` asks the kernel (side effects: a lookup of the name within a deadline, a UDP socket connected
to the master's address -- no packet is sent -- and its local address found among the interfaces' own addresses by
ioctl / /proc/net/if_inet6); ``choose_interface`` is the pure decision over those facts: the interface, with the one
sentence that says how it was chosen, or None with the one sentence that says why none can be (master unknown, not
resolvable, no route, loopback on a job across hosts).

Side effects: ``up_interfaces`` reads /sys/class/net/*/operstate; ``route_facts`` as above.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from ..record import Record

RESOLVE_TIMEOUT_S = 5.0  # a DNS that never answers costs this once


def up_interfaces(sys_net: str = "/sys/class/net") -> list[str]:
    """Network interfaces that are up here (loopback's state is 'unknown'), by name."""
    found = []
    for entry in sorted(Path(sys_net).iterdir()) if Path(sys_net).is_dir() else []:
        try:
            state = (entry / "operstate").read_text().strip()
        except OSError:
            continue
        if state in ("up", "unknown"):
            found.append(entry.name)
    return found


def is_loopback(address: str) -> bool:
    """127.0.0.0/8 and ::1 (an IPv4-mapped 127.x too); a name or anything unparsable is not."""
    import ipaddress

    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(parsed, "ipv4_mapped", None)
    return bool(parsed.is_loopback or (mapped is not None and mapped.is_loopback))


def _unspecified(address: str) -> bool:
    """0.0.0.0 or :: (what a server binds to for every address; no host has it as its own)."""
    import ipaddress

    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_unspecified
    except ValueError:
        return False


def _numeric(master: str) -> bool:
    """An address written as numbers (127.0.0.1, ::1, and the short forms getaddrinfo takes: 127.1), not a name."""
    import socket

    if is_loopback(master) or ":" in master:
        return True
    try:
        socket.inet_aton(master)
    except (OSError, ValueError):
        return False
    return True


def owns(address: str) -> bool:
    """Whether this host holds ``address`` (gloo's own test: it listens on the first address of its host name that it
    can bind; none: 127.0.0.1)."""
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
        return True
    except (OSError, ValueError):
        return False


class RouteFacts(Record):
    """What this machine says of the way to the master: the addresses its name resolves to here (or why none), and
    for each address the interface the kernel's route to it leaves by (None: no route, with the error in ``errors``)."""

    master: str
    addresses: tuple[str, ...] = ()
    resolve_error: str = ""
    routes: Mapping[str, Optional[str]] = {}
    errors: Mapping[str, str] = {}
    up: tuple[str, ...] = ()  # the interfaces that are up (for a master that is loopback here on a job across hosts)


class InterfaceChoice(Record):
    """The interface that reaches the master (None: none can be chosen) and the one sentence that says how, or why not."""

    interface: Optional[str]
    why: str


def choose_interface(master: Optional[str], multi_host: bool, facts: Optional[RouteFacts]) -> InterfaceChoice:
    """The interface a rank on this host must use so the other hosts reach it: the one of the kernel's route to the
    master's first address that is not loopback. A master that is unknown, does not resolve or has no route gives
    None with the reason; one that is loopback here gives None on one host (nothing to choose: the ranks meet on this
    host) and, on a job across hosts, the only interface up besides lo if there is exactly one (this host's own name
    mapped to loopback, the Debian /etc/hosts line), else None saying so. Pure."""
    if not master:
        return InterfaceChoice(None, "no master address is known (pass --master-addr, or set MASTER_ADDR), so no interface is chosen; "
                                     "the ranks of one host need none")
    if facts is None or not facts.addresses:
        error = f" ({facts.resolve_error})" if facts is not None and facts.resolve_error else ""
        return InterfaceChoice(None, f"the master {master} does not resolve here{error}, so no interface that reaches it can be chosen")
    if any(_unspecified(a) for a in facts.addresses):
        return InterfaceChoice(None, f"the master {master} is the unspecified address ({facts.addresses[0]}), which names no host: "
                                     "pass the first host's name or cluster address (--master-addr node01)")
    reachable = [a for a in facts.addresses if not is_loopback(a)]
    if not reachable:
        if multi_host and (_numeric(master) or master.lower().rstrip(".") == "localhost" or master.lower().rstrip(".").endswith(".localhost")):
            # loopback by what it is, on every host (not a host's own name mapped to loopback here): each host would meet itself
            return InterfaceChoice(None, f"the master {master} is loopback on every host, so on a job across hosts each host's ranks would look "
                                         "for the master on themselves; pass the first host's name or cluster address (--master-addr node01)")
        if not multi_host:
            return InterfaceChoice(None, f"the master {master} is this host's loopback ({facts.addresses[0]}): the ranks meet on this host, "
                                         "no interface variable is needed")
        others = [name for name in facts.up if name != "lo"]
        if len(others) == 1:
            return InterfaceChoice(others[0], f"the master {master} resolves to {facts.addresses[0]} (loopback) here, so this is likely the master "
                                              f"and its own name is mapped to loopback (/etc/hosts); {others[0]} is the only interface up besides lo")
        return InterfaceChoice(None, f"the master {master} resolves to {facts.addresses[0]} (loopback) here on a job across hosts, which the other "
                                     f"hosts cannot reach, and {'no interface' if not others else 'several interfaces (' + ', '.join(others) + ')'} "
                                     "besides lo could stand for it; map it to its cluster address in /etc/hosts or DNS")
    for address in reachable:
        interface = facts.routes.get(address)
        if interface:
            shown = master if master == address else f"{master} ({address})"
            return InterfaceChoice(interface, f"{interface} is the interface of the kernel's route to the master {shown}")
    address = reachable[0]
    error = facts.errors.get(address, "")
    return InterfaceChoice(None, f"there is no route from here to the master {master} ({address}{': ' + error if error else ''}), "
                                 "so no interface reaches it")


def route_facts(master: str, timeout: float = RESOLVE_TIMEOUT_S) -> RouteFacts:
    """The master's addresses (resolved within ``timeout``) and, for each, the interface of the kernel's route to it."""
    addresses, error = resolve(master, timeout)
    routes: dict[str, Optional[str]] = {}
    errors: dict[str, str] = {}
    for address in addresses:
        if is_loopback(address):
            continue
        source, problem = route_source(address)
        if source is None:
            routes[address], errors[address] = None, problem
            continue
        interface = interface_with_address(source)
        routes[address] = interface
        if interface is None:
            errors[address] = f"the route leaves from {source}, which no interface here holds"
    return RouteFacts(master, tuple(addresses), error, routes, errors, tuple(up_interfaces()))


def resolve(name: str, timeout: float = RESOLVE_TIMEOUT_S) -> tuple[list[str], str]:
    """(the addresses ``name`` resolves to here, IPv4 first, "") or ([], why not), within ``timeout`` seconds."""
    import socket
    import threading

    found: dict[str, object] = {}

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
            found["addresses"] = list(dict.fromkeys(str(info[4][0]) for info in sorted(infos, key=lambda i: i[0] != socket.AF_INET)))
        except (OSError, UnicodeError, ValueError) as exc:
            found["error"] = str(exc)

    thread = threading.Thread(target=lookup, name="compat-resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return [], f"no answer within {timeout:g} s"
    addresses = found.get("addresses")
    return (list(addresses), "") if isinstance(addresses, list) else ([], str(found.get("error", "no address")))


def route_source(address: str) -> tuple[Optional[str], str]:
    """(the local address the kernel's route to ``address`` leaves from, "") or (None, why not): a UDP socket
    connected to it (connect() on UDP only chooses the route; nothing is sent)."""
    import socket

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            return str(sock.getsockname()[0]).split("%", 1)[0], ""
    except OSError as exc:
        return None, str(exc.strerror or exc)


def interface_with_address(address: str, if_inet6: str = "/proc/net/if_inet6") -> Optional[str]:
    """The interface that holds ``address``: IPv4 by each interface's address (SIOCGIFADDR), IPv6 from /proc/net/if_inet6."""
    import socket

    if ":" in address:
        try:
            text = Path(if_inet6).read_text()
        except OSError:
            return None
        return ipv6_owner(text, address)
    import fcntl
    import struct

    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    return _ipv4_owner_by_route(address)


def _ipv4_owner_by_route(address: str, route: str = "/proc/net/route") -> Optional[str]:
    """An address SIOCGIFADDR does not show (a secondary one): the interface of the main table's most specific route
    that holds it (the address's own subnet)."""
    try:
        return ipv4_route_interface(Path(route).read_text(), address)
    except OSError:
        return None


def ipv6_owner(text: str, address: str) -> Optional[str]:
    """The interface of /proc/net/if_inet6's text that holds ``address`` (hex address, index, prefix, scope, flags, name). Pure."""
    import ipaddress

    try:
        wanted = ipaddress.IPv6Address(address).exploded.replace(":", "")
    except ValueError:
        return None
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 6 and words[0].lower() == wanted:
            return words[5]
    return None


def ipv4_route_interface(text: str, address: str) -> Optional[str]:
    """The interface of the most specific route of /proc/net/route's text (little-endian hex destination and mask)
    whose subnet holds ``address``; None when none does. Pure."""
    import ipaddress
    import socket
    import struct

    try:
        wanted = int(ipaddress.IPv4Address(address))
    except ValueError:
        return None
    best: tuple[int, Optional[str]] = (-1, None)
    for line in text.splitlines()[1:]:
        words = line.split()
        if len(words) < 8:
            continue
        try:
            destination = int(ipaddress.IPv4Address(socket.inet_ntoa(struct.pack("<I", int(words[1], 16)))))
            mask = int(ipaddress.IPv4Address(socket.inet_ntoa(struct.pack("<I", int(words[7], 16)))))
        except (ValueError, struct.error, OSError):
            continue
        if wanted & mask == destination & mask and mask > best[0]:
            best = (mask, words[0])
    return best[1]


# what every rank reads, whatever starts it: gloo's (torch.distributed), and oneCCL's over OFI/tcp (its key-value store
# and libfabric's tcp provider); a launcher adds its own (Launcher.interface_exports: Intel MPI's hydra, Open MPI's tcp)
GLOO_VARIABLES = ("GLOO_SOCKET_IFNAME",)
CCL_VARIABLES = ("CCL_KVS_IFACE", "FI_TCP_IFACE")


def interface_variables(choice: InterfaceChoice, names: Sequence[str], env: Mapping[str, str], who: str) -> tuple[dict[str, str], list[str]]:
    """``names`` set to the chosen interface, except those this environment already sets (kept, and said so); the
    comments say which and why. Nothing (and the reason) when no interface is chosen. Pure."""
    if choice.interface is None or not names:
        return {}, []
    chosen = {name: choice.interface for name in names if not env.get(name)}
    said = []
    if chosen:
        said.append(f"{who}: {', '.join(f'{k}={v}' for k, v in chosen.items())}")
    kept = [name for name in names if env.get(name)]
    if kept:
        said.append(f"{who}: {', '.join(f'{k}={env[k]}' for k in kept)} already set here; kept")
    return chosen, said
