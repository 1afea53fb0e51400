"""Per-client limits count an IPv6 client by its /64 (issue 13 review): a host that
holds a /64 cannot spread its sign-in guesses over 2^64 addresses."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.ratelimit import client_key
from tests.inprocess import InProcess


@pytest.mark.parametrize(
    ("ip", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
        ("2001:DB8:1:2::1", "2001:db8:1:2::/64"),
        ("::ffff:198.51.100.4", "198.51.100.4"),  # IPv4-mapped: the IPv4 client
        ("::1", "::/64"),
        ("testclient", "testclient"),  # not an address: as given
    ],
)
def test_client_key(ip: str, key: str) -> None:
    assert client_key(ip) == key


def _signin(inproc: InProcess, ip: str, username: str) -> int:
    c = TestClient(inproc.app, client=(ip, 40000), follow_redirects=False)
    c.get("/healthz")
    r = c.post(
        "/signin",
        data={"username": username, "password": "a wrong guess"},
        headers={"X-CSRF-Token": c.cookies["lowbit_csrf"]},
    )
    return r.status_code


def test_guesses_from_one_ipv6_64_share_one_limit(inproc: InProcess) -> None:
    per_ip = inproc.settings.login_attempts_per_ip_per_minute
    codes = [_signin(inproc, f"2001:db8:77:1::{i + 1:x}", f"v6spray{i}") for i in range(per_ip + 1)]
    assert codes[:per_ip] == [422] * per_ip  # every address is new, the /64 is not
    assert codes[-1] == 429
    # The next /64 is another client.
    assert _signin(inproc, "2001:db8:77:2::1", "v6spray-other") == 422
