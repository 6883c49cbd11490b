"""Address policy of the live fetcher (SSRF guard) and the transport that enforces it.

A host that is, or resolves to, a loopback, private, link-local (cloud metadata 169.254.169.254
included), unique-local (``fd00:ec2::254``), reserved, multicast or otherwise non-global address is
refused, IPv4 embedded in IPv6 (``::ffff:127.0.0.1``, NAT64, 6to4, Teredo) included. With
:class:`GuardedTransport` the check happens at connection time and the connection goes to exactly
the address that was checked (the host name is still used for TLS SNI and certificate checks), so a
DNS answer that changes between check and connection (DNS rebinding) cannot redirect it.
Environment proxies are never used. :class:`kit.web.fetch.HttpFetcher` applies the policy.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable

import httpcore
import httpx

from kit.types import BackendError

__all__ = ["AddressCheck", "AddressRefused", "GuardedNetworkBackend", "GuardedTransport", "Resolver",
           "is_public_ip", "system_resolver"]

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> list of IP address strings`` used for the address check."""

_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
# Not global in practice although Python's tables call parts of them global: the IETF protocol
# assignments block holds Oracle Cloud's metadata service (192.0.0.192).
_ALSO_BLOCKED = (ipaddress.ip_network("192.0.0.0/24"),)


class AddressRefused(BackendError):
    """A URL refused by the address policy (never retried)."""

    def __init__(self, message: str):
        super().__init__(message, retryable=False)


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve ``host`` with the system resolver (``getaddrinfo``), without blocking the loop."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0] for info in infos})


def is_public_ip(address: str) -> bool:
    """True when ``address`` is a globally routable unicast IP: not loopback, private, unique-local
    (``fc00::/7``, e.g. ``fd00:ec2::254``), link-local (``169.254.0.0/16`` with the cloud metadata
    address, ``fe80::/10``), site-local, shared, reserved, multicast, unspecified or in
    ``192.0.0.0/24`` (Oracle Cloud's metadata service 192.0.0.192). An IPv4 address
    embedded in IPv6 (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) must be public too.

    Raises:
        ValueError: ``address`` is not an IP address.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded: list[ipaddress.IPv4Address] = []
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            embedded.append(ip.sixtofour)
        if ip.teredo is not None:
            embedded.extend(ip.teredo)
        if any(ip in net for net in _NAT64) or int(ip) >> 32 == 0:  # NAT64 / IPv4-compatible ::a.b.c.d
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.is_site_local or any(not is_public_ip(str(v4)) for v4 in embedded):
            return False
        if ip.ipv4_mapped is not None:
            return True  # a public IPv4 address written in IPv6 form
    if any(ip in net for net in _ALSO_BLOCKED if net.version == ip.version):
        return False
    return ip.is_global and not ip.is_multicast and not ip.is_reserved


AddressCheck = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> checked IP addresses`` to connect to; raises :class:`AddressRefused`."""


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend that resolves and checks the host itself and connects to exactly the
    addresses it checked (in order), so no second DNS lookup happens between check and connect.
    Unix sockets are refused. ``inner`` makes the actual connections (default: httpcore's anyio
    backend)."""

    def __init__(self, check: AddressCheck, inner: httpcore.AsyncNetworkBackend | None = None):
        self._check = check
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options=None) -> httpcore.AsyncNetworkStream:
        addresses = await self._check(host, port)
        last: Exception | None = None
        for ip in addresses:
            try:
                return await self._inner.connect_tcp(ip, port, timeout=timeout, local_address=local_address,
                                                     socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as err:
                last = err
        raise last if last is not None else httpcore.ConnectError(f"no address to connect to for {host!r}")

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options=None):
        raise AddressRefused(f"refusing to connect to the unix socket {path!r}")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


_DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # shared, never mutated


class GuardedTransport(httpx.AsyncHTTPTransport):
    """An ``httpx`` transport whose connections go through a :class:`GuardedNetworkBackend`; TLS
    still verifies the certificate against the URL's host name. Environment proxies and ``.netrc``
    are ignored (a proxy would resolve names itself, defeating the check)."""

    def __init__(self, check: AddressCheck, *, network_backend: httpcore.AsyncNetworkBackend | None = None,
                 limits: httpx.Limits = _DEFAULT_LIMITS):
        super().__init__(trust_env=False, limits=limits)
        # httpx builds its httpcore pool without a way to pass a network backend, so the pool is
        # rebuilt here with the same settings plus the guarded backend.
        if not hasattr(self, "_pool"):  # pragma: no cover - guards against an httpx layout change
            raise RuntimeError("this httpx version keeps no _pool; GuardedTransport needs updating")
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=GuardedNetworkBackend(check, network_backend),
        )
