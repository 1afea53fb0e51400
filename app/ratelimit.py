"""Per-client limits (the ``limits`` library): sign-in attempts, new anonymous
learners and anonymous lab runs.

``hit`` counts and checks in one atomic step (a lock in memory, a Lua script on
Redis), so concurrent requests cannot all pass a check before any of them is
counted. With a Redis queue the counters live in that Redis, so every web
replica shares them; otherwise they live in this process.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from limits import RateLimitItem, RateLimitItemPerHour, RateLimitItemPerMinute
from limits.storage import Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from app.settings import Settings

log = logging.getLogger("lowbit.ratelimit")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class RateLimited(Exception):
    """Over a per-client limit: answered 429 with ``Retry-After``."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True)
class Rule:
    """One named limit: ``item`` hits per window, keyed by ``namespace`` + ids."""

    namespace: str
    item: RateLimitItem
    message: str


class Limiter:
    """The limits this app enforces, on one storage."""

    def __init__(self, settings: Settings, storage: Storage | None = None):
        self.storage = storage or storage_from_string(settings.rate_limit_uri)
        self._limiter = MovingWindowRateLimiter(self.storage)
        # While the shared storage (Redis) is unreachable, each replica counts in its
        # own memory: the limits still hold per replica, and no request fails for it.
        self._fallback = MovingWindowRateLimiter(storage_from_string("memory://"))
        wait = "Wait a minute and try again."
        self.signin_user_ip = Rule(
            "signin-user-ip",
            RateLimitItemPerMinute(settings.login_attempts_per_minute),
            f"Too many sign-in attempts for this username. {wait}",
        )
        self.signin_ip = Rule(
            "signin-ip",
            RateLimitItemPerMinute(settings.login_attempts_per_ip_per_minute),
            f"Too many sign-in attempts from your network. {wait}",
        )
        self.signin_user = Rule(
            "signin-user",
            RateLimitItemPerHour(settings.login_attempts_per_user_per_hour),
            "Too many sign-in attempts for this username this hour. Try again later.",
        )
        self.new_learner = Rule(
            "new-learner",
            RateLimitItemPerMinute(settings.new_learners_per_ip_per_minute),
            f"Too many new visitors from your network at once. {wait}",
        )
        self.anonymous_run = Rule(
            "anon-run",
            RateLimitItemPerMinute(settings.anonymous_runs_per_ip_per_minute),
            "Too many lab runs from your network without an account. "
            "Wait a minute, or sign in to run more.",
        )

    def hit(self, rule: Rule, *ids: str) -> None:
        """Count one event against ``rule``; raise ``RateLimited`` if it is over."""
        limiter = self._limiter
        try:
            allowed = limiter.hit(rule.item, rule.namespace, *ids)
        except Exception as e:  # the shared storage is down: count here instead
            log.warning(
                "rate limit storage unavailable; counting in this process",
                extra={"error": f"{type(e).__name__}: {str(e)[:200]}"},
            )
            limiter = self._fallback
            allowed = limiter.hit(rule.item, rule.namespace, *ids)
        if not allowed:
            raise RateLimited(rule.message, self._retry_after(limiter, rule, ids))

    def clear(self, rule: Rule, *ids: str) -> None:
        for limiter in (self._limiter, self._fallback):
            try:
                limiter.clear(rule.item, rule.namespace, *ids)
            except Exception:  # noqa: S112 - the storage is down; nothing to clear there
                continue

    def _retry_after(self, limiter: MovingWindowRateLimiter, rule: Rule, ids: Iterable[str]) -> int:
        try:
            reset, _ = limiter.get_window_stats(rule.item, rule.namespace, *ids)
        except Exception:  # statistics are advisory; the limit itself already held
            return rule.item.get_expiry()
        return max(1, int(reset - time.time()) + 1)


def parse_networks(spec: str) -> tuple[Network, ...]:
    """``"10.0.0.0/8, 127.0.0.1"`` → networks; raises ValueError naming a bad entry."""
    out: list[Network] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"trusted_proxies: {part!r} is not an address or CIDR range") from None
    return tuple(out)


def _trusted(addr: str, proxies: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in net for net in proxies)


# One client, as a per-client limit counts it: an IPv6 host commonly holds a whole /64
# (SLAAC, privacy addresses), so counting per address would give it 2^64 budgets.
IPV6_CLIENT_PREFIX = 64


def client_key(ip: str) -> str:
    """What a per-client limit counts ``ip`` as: an IPv4 address itself (an IPv4-mapped
    IPv6 address as its IPv4), an IPv6 address as its /64, anything else as given."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.ip_network(f"{addr}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(addr)


def client_ip(peer: str, forwarded_for: str, proxies: tuple[Network, ...]) -> str:
    """The client's address: the TCP peer, unless the peer is a trusted proxy; then the
    right-most address in ``X-Forwarded-For`` that is not itself a trusted proxy (the
    left part of that header is whatever the client chose to send)."""
    if not proxies or not _trusted(peer, proxies):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            return hop
    return hops[0] if hops else peer
