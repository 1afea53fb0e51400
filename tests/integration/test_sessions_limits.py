"""Sessions and per-client limits against a real server and database, with the
default limits (issue 13: fixation, revocation, atomic sign-in limits, quota
bypass by dropping cookies, request size and depth, /metrics)."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import func, select, update

from app.db import AuthSession, Learner, utcnow
from tests.integration.conftest import STACK_SETTINGS, Stack, open_stack, run_async, setting_default
from tests.integration.rawhttp import send_whole_body_then_read

LIMIT_KEYS = (
    "LOWBIT_ANONYMOUS_RUNS_PER_IP_PER_MINUTE",
    "LOWBIT_NEW_LEARNERS_PER_IP_PER_MINUTE",
    "LOWBIT_LOGIN_ATTEMPTS_PER_IP_PER_MINUTE",
)


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack (server + worker, SQLite) with the default per-client limits."""
    env = {k: setting_default(k) for k in LIMIT_KEYS}
    assert all(STACK_SETTINGS[k] != env[k] for k in LIMIT_KEYS)
    with open_stack("defaults", tmp_path_factory.mktemp("defaults"), env) as s:
        yield s


def _client(stack: Stack, source: str = "127.0.0.1") -> httpx.Client:
    """A browser from ``source`` (any 127.x address reaches the loopback server)."""
    transport = httpx.HTTPTransport(local_address=source)
    c = httpx.Client(base_url=stack.url, timeout=30, transport=transport)
    c.get("/healthz").raise_for_status()
    c.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
    return c


def _sign_up(c: httpx.Client) -> tuple[str, str]:
    name, pw = "u" + secrets.token_hex(5), "a long passphrase " + secrets.token_hex(3)
    r = c.post("/signup", data={"username": name, "password": pw, "password2": pw})
    assert r.status_code == 303, r.text
    return name, pw


def _copy(stack: Stack, c: httpx.Client) -> httpx.Client:
    """Another browser holding a copy of ``c``'s cookies (a stolen or fixed cookie)."""
    other = httpx.Client(base_url=stack.url, timeout=30, cookies=dict(c.cookies))
    other.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
    return other


def _signed_in_as(c: httpx.Client) -> str | None:
    r = c.get("/account", follow_redirects=False)
    if r.status_code != 200:
        return None
    return r.text.split("Account: ", 1)[1].split("<", 1)[0].strip()


# -- 9. session fixation ---------------------------------------------------------


def test_cookie_from_before_sign_up_is_no_key_to_the_account(defaults: Stack) -> None:
    victim = _client(defaults)
    fixed = _copy(defaults, victim)  # the attacker planted or copied this cookie
    name, _ = _sign_up(victim)
    assert _signed_in_as(victim) == name
    assert _signed_in_as(fixed) is None
    assert name not in fixed.get("/progress").text
    # a run started with the old cookie belongs to a fresh anonymous learner
    r = fixed.post("/api/labs/torch-env/runs", json={})
    assert r.status_code == 202
    with defaults.factory() as s:
        account = s.scalar(select(Learner).where(Learner.username == name))
        from app.db import Run

        owner = s.get(Run, r.json()["id"]).learner_id
    assert owner != account.id
    assert victim.get(f"/api/runs/{r.json()['id']}").status_code == 404


def test_cookie_from_before_sign_in_is_no_key_to_the_account(defaults: Stack) -> None:
    first = _client(defaults)
    name, pw = _sign_up(first)
    browser = _client(defaults)
    fixed = _copy(defaults, browser)
    r = browser.post("/signin", data={"username": name, "password": pw})
    assert r.status_code == 303
    assert _signed_in_as(browser) == name and _signed_in_as(fixed) is None
    assert browser.cookies["lowbit_session"] != fixed.cookies["lowbit_session"]


# -- 10. revocation ---------------------------------------------------------------


def test_sign_out_password_change_and_everywhere_end_sessions(defaults: Stack) -> None:
    a = _client(defaults)
    name, pw = _sign_up(a)
    stolen = _copy(defaults, a)
    assert _signed_in_as(stolen) == name
    a.post("/signout")
    assert _signed_in_as(stolen) is None  # the old cookie died with the sign-out

    # a password change ends every other session, not this one
    b = _client(defaults)
    assert b.post("/signin", data={"username": name, "password": pw}).status_code == 303
    c = _client(defaults)
    assert c.post("/signin", data={"username": name, "password": pw}).status_code == 303
    new = pw + " 2"
    r = b.post("/account/password", data={"old": pw, "new": new, "new2": new})
    assert "Password changed" in r.text
    assert _signed_in_as(b) == name and _signed_in_as(c) is None

    d = _client(defaults)
    assert d.post("/signin", data={"username": name, "password": new}).status_code == 303
    assert "2 devices" in b.get("/account").text
    b.post("/account/signout-everywhere")
    assert _signed_in_as(b) is None and _signed_in_as(d) is None


def test_sessions_expire_on_the_server(defaults: Stack) -> None:
    a = _client(defaults)
    name, _ = _sign_up(a)
    with defaults.factory() as s:
        account = s.scalar(select(Learner).where(Learner.username == name))
        s.execute(
            update(AuthSession)
            .where(AuthSession.learner_id == account.id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
        s.commit()
    assert _signed_in_as(a) is None


# -- 11. sign-in limits -------------------------------------------------------------


async def _burst(url: str, n: int, make: object, source: str = "127.0.0.1") -> list[int]:
    """``n`` requests from already-open connections, released at once."""
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(base_url=url, timeout=60, transport=transport) as c:
        r = await c.get("/healthz")
        csrf = c.cookies["lowbit_csrf"]
        gate = asyncio.Event()

        async def one(i: int) -> int:
            await gate.wait()
            return (await make(c, csrf, i)).status_code  # type: ignore[operator]

        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        await asyncio.sleep(0.2)
        gate.set()
        assert r.status_code == 200
        return list(await asyncio.gather(*tasks))


def test_concurrent_wrong_passwords_cannot_pass_the_limit(defaults: Stack) -> None:
    owner = _client(defaults)
    name, pw = _sign_up(owner)

    async def guess(c: httpx.AsyncClient, csrf: str, i: int) -> httpx.Response:
        return await c.post(
            "/signin", data={"username": name, "password": f"wrong {i}", "csrf_token": csrf}
        )

    codes = run_async(_burst(defaults.url, 40, guess, "127.0.0.2"))
    limit = int(setting_default("LOWBIT_LOGIN_ATTEMPTS_PER_MINUTE"))
    assert codes.count(422) <= limit and codes.count(429) >= 40 - limit
    assert set(codes) <= {422, 429}
    # the owner, from another address, is not locked out by someone else's guesses
    elsewhere = _client(defaults, "127.0.0.3")
    r = elsewhere.post("/signin", data={"username": name, "password": pw})
    assert r.status_code == 303


def test_spraying_usernames_from_one_client_is_limited(defaults: Stack) -> None:
    c = _client(defaults, "127.0.0.4")
    per_ip = int(setting_default("LOWBIT_LOGIN_ATTEMPTS_PER_IP_PER_MINUTE"))
    codes = [
        c.post("/signin", data={"username": f"spray{i}", "password": "guess guess"}).status_code
        for i in range(per_ip + 2)
    ]
    assert codes[:per_ip] == [422] * per_ip and codes[-1] == 429


def test_forwarded_for_is_not_believed_bysetting_default(defaults: Stack) -> None:
    c = _client(defaults, "127.0.0.5")
    per_ip = int(setting_default("LOWBIT_LOGIN_ATTEMPTS_PER_IP_PER_MINUTE"))
    codes = [
        c.post(
            "/signin",
            data={"username": f"xff{i}", "password": "guess guess"},
            headers={"X-Forwarded-For": f"10.9.{i}.1"},
        ).status_code
        for i in range(per_ip + 1)
    ]
    assert codes[-1] == 429
    r = c.post("/signin", data={"username": "x", "password": "y"})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1


# -- 4. learners and anonymous runs per client ----------------------------------------


def _learners(stack: Stack) -> int:
    with stack.factory() as s:
        return int(s.scalar(select(func.count()).select_from(Learner)) or 0)


def test_reading_without_cookies_writes_no_learner(defaults: Stack) -> None:
    before = _learners(defaults)
    for path in ("/", "/terms", "/terms/alpha", "/labs", "/progress", "/notebook", "/review"):
        for _ in range(3):
            assert httpx.get(defaults.url + path, timeout=30).status_code == 200, path
    assert _learners(defaults) == before


def test_fresh_cookies_cannot_multiply_the_run_quota(defaults: Stack) -> None:
    per_ip = int(setting_default("LOWBIT_ANONYMOUS_RUNS_PER_IP_PER_MINUTE"))
    codes = []
    for _ in range(per_ip + 2):
        c = _client(defaults, "127.0.0.6")  # a new cookie each time
        r = c.post("/api/labs/torch-env/runs", json={})
        codes.append(r.status_code)
    assert codes[:per_ip] == [202] * per_ip
    assert codes[-1] == 429 and int(r.headers["retry-after"]) >= 1
    # an account is not held to the anonymous limit
    acct = _client(defaults, "127.0.0.6")
    _sign_up(acct)
    assert acct.post("/api/labs/torch-env/runs", json={}).status_code == 202


# -- 5. concurrent first requests of one learner (both stacks) --------------------------


def test_first_requests_of_a_new_learner_all_succeed(stack: Stack) -> None:
    stack.ensure_running()

    async def visit(c: httpx.AsyncClient, csrf: str, i: int) -> httpx.Response:
        return await c.post(
            "/progress/seen",
            data={"kind": "term", "slug": "alpha", "detail": "1", "csrf_token": csrf},
        )

    codes = run_async(_burst(stack.url, 50, visit))
    assert all(code < 500 for code in codes), codes


# -- 2, 3. request size and nesting --------------------------------------------------


def test_oversized_bodies_are_refused_before_they_are_read(defaults: Stack) -> None:
    c = _client(defaults)
    limit = int(setting_default("LOWBIT_MAX_BODY_BYTES"))
    big = b'{"values": [' + b"1," * (limit // 2) + b"1]}"
    r = c.post(
        "/api/labs/block-quantize/runs", content=big, headers={"content-type": "application/json"}
    )
    assert r.status_code == 413 and "MiB" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"values": ['
        for _ in range(64):
            yield b"1," * (limit // 64)
        yield b"1]}"

    r = c.post(
        "/api/labs/block-quantize/runs",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413
    form = {"shape": "x" * (limit + 10), "csrf_token": c.cookies["lowbit_csrf"]}
    assert c.post("/labs/block-quantize/runs", data=form).status_code == 413
    assert httpx.get(defaults.url + "/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_client_that_sends_a_40_mib_body_before_reading_gets_the_413(
    defaults: Stack, chunked: bool
) -> None:
    """A browser uploading a large form reads nothing until it has sent it all: the
    server drains the refused body (up to a bound) so the 413 arrives instead of a
    connection reset."""
    size = 40 * 1_048_576
    assert size <= int(setting_default("LOWBIT_BODY_DRAIN_BYTES"))
    answer = send_whole_body_then_read(
        defaults.url, "/api/labs/block-quantize/runs", size, chunked=chunked
    )
    assert answer.status == 413
    assert "MiB" in json.loads(answer.body)["detail"]
    assert httpx.get(defaults.url + "/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 50_000,
        b'{"distribution": "custom", "values": ' + b"[" * 990 + b"1" + b"]" * 990 + b"}",
    ],
    ids=["top-level", "inside-values"],
)
def test_deeply_nested_json_is_a_422(defaults: Stack, body: bytes) -> None:
    c = _client(defaults)
    r = c.post(
        "/api/labs/block-quantize/runs", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and "levels deep" in r.json()["detail"]


def test_deeply_nested_form_field_is_a_422(defaults: Stack) -> None:
    c = _client(defaults)
    form = {"shape": "[" * 2000 + "]" * 2000, "csrf_token": c.cookies["lowbit_csrf"]}
    r = c.post("/labs/block-quantize/runs", data=form, headers={"Accept": "text/html"})
    assert r.status_code == 422 and "levels deep" in r.text


# -- 13. /metrics ----------------------------------------------------------------------


def test_metrics_are_not_public(defaults: Stack, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert httpx.get(defaults.url + "/metrics", timeout=10).status_code == 200  # loopback
    proxied = httpx.get(
        defaults.url + "/metrics", headers={"X-Forwarded-For": "203.0.113.9"}, timeout=10
    )
    assert proxied.status_code == 404
    token = secrets.token_hex(16)
    with open_stack(
        "metrics", tmp_path_factory.mktemp("metrics"), {"LOWBIT_METRICS_TOKEN": token}
    ) as s:
        assert httpx.get(s.url + "/metrics", timeout=10).status_code == 404
        ok = httpx.get(s.url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert ok.status_code == 200 and "lowbit" in ok.text


def test_depth_is_checked_whatever_the_declared_type(defaults: Stack) -> None:
    c = _client(defaults)
    for ctype in ("text/plain", "Application/JSON"):
        r = c.post(
            "/api/labs/block-quantize/runs", content=b"[" * 5000, headers={"content-type": ctype}
        )
        assert r.status_code == 422, (ctype, r.status_code)


def test_a_deeply_nested_link_value_is_a_message_not_a_500(defaults: Stack) -> None:
    c = _client(defaults)
    for depth in (600, 2000):
        r = c.get("/labs/block-quantize", params={"shape": "[" * depth + "]" * depth})
        assert r.status_code in (200, 422), (depth, r.status_code)


def test_a_non_ascii_csrf_token_is_refused_not_a_500(defaults: Stack) -> None:
    c = _client(defaults)
    r = c.post("/api/labs/torch-env/runs", json={}, headers={"X-CSRF-Token": ("é" * 20).encode()})
    assert r.status_code == 403
    form = {"csrf_token": "é" * 20, "username": "x", "password": "y"}
    r = c.post("/signin", data=form, headers={"X-CSRF-Token": ""})
    assert r.status_code == 403
