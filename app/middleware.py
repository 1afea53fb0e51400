"""One pure-ASGI middleware for what every request needs: a request id and a
JSON access log line, the learner's signed session cookie, CSRF enforcement on
every unsafe method (so no route can forget it), and security headers.

Pure ASGI (not BaseHTTPMiddleware) so server-sent event streams pass through
unbuffered.
"""

from __future__ import annotations

import html
import json
import logging
import secrets
import time
import uuid
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import anyio
from itsdangerous import BadSignature, URLSafeSerializer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import sessions
from app.metrics import observe_request
from app.ratelimit import client_ip, client_key, parse_networks
from app.settings import Settings

log = logging.getLogger("lowbit.access")

SESSION_COOKIE = "lowbit_session"
CSRF_COOKIE = "lowbit_csrf"
CSRF_HEADER = b"x-csrf-token"
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
CSRF_MESSAGE = (
    "This form has expired or was sent from another site (CSRF check failed). "
    "Reload the page and try again."
)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
]


def session_serializer(settings: Settings) -> URLSafeSerializer:
    return URLSafeSerializer(settings.secret_key, salt="lowbit-session")


def _cookies(scope: Scope) -> dict[str, str]:
    raw = b"; ".join(v for k, v in scope.get("headers", []) if k == b"cookie").decode("latin-1")
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # a malformed cookie header is treated as no cookies
        return {}
    return {k: m.value for k, m in jar.items()}


def _cookie_header(name: str, value: str, *, http_only: bool, secure: bool, max_age: int) -> bytes:
    parts = [f"{name}={value}", "Path=/", "SameSite=Lax", f"Max-Age={max_age}"]
    if http_only:
        parts.append("HttpOnly")
    if secure:
        parts.append("Secure")
    return "; ".join(parts).encode()


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """True when arrays/objects in ``body`` nest deeper than ``limit``: a linear scan
    that skips strings, so a hostile body is refused before any recursive parser
    (``json.loads``, pydantic) could overflow the stack on it."""
    depth = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return False


# How long a refused body is drained before the connection is closed anyway.
DRAIN_SECONDS = 10.0


class BodyTooLarge(Exception):
    pass


class LowbitMiddleware:
    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.settings = settings
        self.signer = session_serializer(settings)
        self.proxies = parse_networks(settings.trusted_proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope.get("headers", []))
        request_id = headers.get(b"x-request-id", b"").decode("latin-1")[:64] or uuid.uuid4().hex
        cookies = _cookies(scope)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        peer = (scope.get("client") or ("", 0))[0]
        forwarded = headers.get(b"x-forwarded-for", b"").decode("latin-1")
        state["client_ip"] = client_ip(peer, forwarded, self.proxies)
        state["client_key"] = client_key(state["client_ip"])  # what per-client limits count

        new_cookies: list[bytes] = []
        token = cookies.get(SESSION_COOKIE)
        await self._identify(scope, state, token)
        if state["learner_id"] is None:
            state["learner_id"] = uuid.uuid4().hex
            state["session_data"] = {"l": state["learner_id"]}

        csrf = cookies.get(CSRF_COOKIE)
        if not csrf or len(csrf) < 20:
            csrf = secrets.token_urlsafe(32)
            new_cookies.append(
                _cookie_header(
                    CSRF_COOKIE,
                    csrf,
                    http_only=False,
                    secure=self.settings.secure_cookies,
                    max_age=31536000,
                )
            )
        state["csrf_token"] = csrf

        method = scope["method"]
        if method not in SAFE_METHODS:
            refusal: tuple[int, str] | None
            try:
                body = await self._read_body(headers, receive)
            except BodyTooLarge:
                await self._drain(headers, receive)
                refusal = (413, self._too_large())
            else:
                receive = _replay(body, receive)
                refusal = self._refusal(headers, body, csrf)
            if refusal is not None:
                status, msg = refusal
                await self._reject(scope, send, request_id, new_cookies, status, msg)
                self._log(scope, status, started, request_id, state["learner_id"])
                return

        status_holder = {"status": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                hdrs = list(message.get("headers", []))
                have = {k.lower() for k, _ in hdrs}
                hdrs.extend(h for h in SECURITY_HEADERS if h[0] not in have)
                hdrs.append((b"x-request-id", request_id.encode()))
                cookies_out = list(new_cookies)
                if state.get("session_data"):
                    cookies_out.append(self.session_cookie(state["session_data"]))
                for c in cookies_out:
                    hdrs.append((b"set-cookie", c))
                message["headers"] = hdrs
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self._log(scope, status_holder["status"], started, request_id, state["learner_id"])

    async def _identify(self, scope: Scope, state: dict[str, Any], token: str | None) -> None:
        """Fill ``learner_id``, ``username`` and ``signed_in`` from the session cookie.

        ``{"l": id}`` names an anonymous learner (the dependency checks it is still
        anonymous); ``{"s": token}`` is a server-side session looked up here. Anything
        else, including cookies from before server-side sessions, counts as none."""
        state.update(learner_id=None, username=None, signed_in=False, session_token=None)
        state["session_data"] = None
        if not token:
            return
        try:
            data = self.signer.loads(token)
        except BadSignature:
            return
        if not isinstance(data, dict):
            return
        if isinstance(data.get("l"), str) and "u" not in data and len(data["l"]) <= 32:
            state["learner_id"] = data["l"]
            return
        session_token = data.get("s")
        if not isinstance(session_token, str):
            return
        factory = scope["app"].state.sessionmaker

        def lookup() -> tuple[str, str | None] | None:
            with factory() as db:
                return sessions.resolve(db, session_token)

        try:
            found = await anyio.to_thread.run_sync(lookup)
        except Exception as e:  # the database is down: routes that need it answer 503
            state["identity_error"] = e
            state["learner_id"] = uuid.uuid4().hex  # a placeholder nobody can own
            return
        if found is None:  # expired or ended: this browser is anonymous again
            return
        state["learner_id"], state["username"] = found
        state.update(signed_in=True, session_token=session_token)

    def session_cookie(self, data: dict[str, str]) -> bytes:
        signed_in = "s" in data
        days = self.settings.session_days if signed_in else 365
        return _cookie_header(
            SESSION_COOKIE,
            self.signer.dumps(data),
            http_only=True,
            secure=self.settings.secure_cookies,
            max_age=int(days * 86400),
        )

    async def _read_body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        """The whole body, refusing (``BodyTooLarge``) as soon as it passes the limit:
        a declared Content-Length over it is refused before a byte is read."""
        limit = self.settings.max_body_bytes
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    async def _drain(self, headers: dict[bytes, bytes], receive: Receive) -> None:
        """Read and discard the rest of a refused body, up to ``body_drain_bytes`` and
        ``DRAIN_SECONDS``: closing a connection with unread data makes the kernel send
        a reset, and a client still sending (a browser uploading a form) then shows
        "connection reset" instead of the 413. A client that waits for
        ``100 Continue`` has sent nothing and is answered at once; one that declares
        more than the bound gets the 413 without the wait."""
        bound = self.settings.body_drain_bytes
        declared = headers.get(b"content-length", b"")
        if b"100-continue" in headers.get(b"expect", b"").lower():
            return
        if declared.isdigit() and int(declared) > bound:
            return
        drained = 0
        with anyio.move_on_after(DRAIN_SECONDS):
            while drained <= bound:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                drained += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return

    def _too_large(self) -> str:
        mib = self.settings.max_body_bytes / 1_048_576
        return f"The request body is larger than the {mib:g} MiB lowbit accepts."

    def _refusal(
        self, headers: dict[bytes, bytes], body: bytes, csrf: str
    ) -> tuple[int, str] | None:
        """(status, message) for an unsafe request refused before the app sees it: a
        failed CSRF check (403), or lists or objects nested too deep (422). A form
        body is parsed once for both."""
        ctype = headers.get(b"content-type", b"").split(b";")[0].strip()
        form = (
            parse_qs(body.decode("utf-8", "replace"))
            if ctype.lower() == b"application/x-www-form-urlencoded"
            else None
        )
        if not self._csrf_ok(headers, ctype, form, csrf):
            return 403, CSRF_MESSAGE
        if self._too_deep(ctype, body, form):
            return 422, (
                f"The request nests lists or objects more than "
                f"{self.settings.max_json_depth} levels deep; nothing lowbit accepts is that deep."
            )
        return None

    def _too_deep(self, ctype: bytes, body: bytes, form: dict[str, list[str]] | None) -> bool:
        """Form fields are scanned one by one; any other body (whatever its declared
        type: a route may parse it as JSON anyway) is scanned whole."""
        limit = self.settings.max_json_depth
        if form is not None:
            return any(json_depth_exceeds(v.encode(), limit) for vs in form.values() for v in vs)
        if ctype.lower().startswith(b"multipart/"):
            return False
        return json_depth_exceeds(body, limit)

    @staticmethod
    def _csrf_ok(
        headers: dict[bytes, bytes], ctype: bytes, form: dict[str, list[str]] | None, csrf: str
    ) -> bool:
        sent = headers.get(CSRF_HEADER, b"")
        if sent:
            return secrets.compare_digest(sent, csrf.encode())
        if ctype != b"application/x-www-form-urlencoded" or form is None:
            return False
        token = (form.get("csrf_token") or [""])[0]
        # As bytes: compare_digest refuses non-ASCII text (a forged token is a 403, not a 500).
        return bool(token) and secrets.compare_digest(token.encode(), csrf.encode())

    async def _reject(
        self,
        scope: Scope,
        send: Send,
        request_id: str,
        cookies: list[bytes],
        status: int,
        msg: str,
    ) -> None:
        accept = dict(scope.get("headers", [])).get(b"accept", b"")
        title = {403: "Request refused", 413: "Request too large"}.get(status, "Request refused")
        if b"text/html" in accept:
            body = (
                f"<!doctype html><html lang=en><meta charset=utf-8><title>{title}</title>"
                f"<main><h1>{title}</h1><p>{html.escape(msg)}</p>"
                "<p><a href='/'>Back to lowbit</a></p></main></html>"
            ).encode()
            ctype = b"text/html; charset=utf-8"
        else:
            body = json.dumps({"detail": msg}).encode()
            ctype = b"application/json"
        hdrs = [
            (b"content-type", ctype),
            (b"content-length", str(len(body)).encode()),
            *SECURITY_HEADERS,
            (b"x-request-id", request_id.encode()),
        ]
        if status == 413:
            hdrs.append((b"connection", b"close"))
        hdrs += [(b"set-cookie", c) for c in cookies]
        await send({"type": "http.response.start", "status": status, "headers": hdrs})
        await send({"type": "http.response.body", "body": body})

    def _log(
        self, scope: Scope, status: int, started: float, request_id: str, learner_id: Any
    ) -> None:
        route = scope.get("route")
        seconds = time.perf_counter() - started
        observe_request(
            scope.get("method", ""), getattr(route, "path", "unmatched"), status, seconds
        )
        log.info(
            "request",
            extra={
                "request_id": request_id,
                "method": scope.get("method"),
                "path": scope.get("path"),
                "route": getattr(route, "path", None),
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
                "learner": str(learner_id)[:8],
            },
        )


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the real stream
    (for the disconnect message)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
