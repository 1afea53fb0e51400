"""One pure-ASGI middleware for what every request needs: a request id and a
JSON access log line, the learner's signed session cookie, CSRF enforcement on
every unsafe method (so no route can forget it), and security headers.

Pure ASGI (not BaseHTTPMiddleware) so server-sent event streams pass through
unbuffered.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
import uuid
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.metrics import observe_request
from app.settings import Settings

log = logging.getLogger("lowbit.access")

SESSION_COOKIE = "lowbit_session"
CSRF_COOKIE = "lowbit_csrf"
CSRF_HEADER = b"x-csrf-token"
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
MAX_FORM_BYTES = 1_000_000
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


class LowbitMiddleware:
    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.settings = settings
        self.signer = session_serializer(settings)

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

        new_cookies: list[bytes] = []
        learner_id = None
        token = cookies.get(SESSION_COOKIE)
        if token:
            try:
                data = self.signer.loads(token)
                learner_id = data.get("l") if isinstance(data, dict) else None
                state["username"] = data.get("u") if isinstance(data, dict) else None
            except BadSignature:
                learner_id = None
        if not learner_id:
            learner_id = uuid.uuid4().hex
            new_cookies.append(self.session_cookie(learner_id))
        state["learner_id"] = learner_id
        state.setdefault("username", None)
        state["set_session"] = None

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
            ok, receive = await self._check_csrf(scope, receive, headers, csrf)
            if not ok:
                await self._reject(scope, send, request_id, new_cookies)
                self._log(scope, 403, started, request_id, learner_id)
                return

        status_holder = {"status": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                hdrs = list(message.get("headers", []))
                hdrs.extend(SECURITY_HEADERS)
                hdrs.append((b"x-request-id", request_id.encode()))
                cookies_out = list(new_cookies)
                if state.get("set_session"):
                    new = state["set_session"]
                    lid, user = new if isinstance(new, tuple) else (new, None)
                    cookies_out.append(self.session_cookie(lid, user))
                for c in cookies_out:
                    hdrs.append((b"set-cookie", c))
                message["headers"] = hdrs
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self._log(scope, status_holder["status"], started, request_id, learner_id)

    def session_cookie(self, learner_id: str, username: str | None = None) -> bytes:
        data = {"l": learner_id, "u": username} if username else {"l": learner_id}
        return _cookie_header(
            SESSION_COOKIE,
            self.signer.dumps(data),
            http_only=True,
            secure=self.settings.secure_cookies,
            max_age=31536000,
        )

    async def _check_csrf(
        self,
        scope: Scope,
        receive: Receive,
        headers: dict[bytes, bytes],
        csrf: str,
    ) -> tuple[bool, Receive]:
        sent = headers.get(CSRF_HEADER, b"").decode("latin-1")
        if sent:
            return secrets.compare_digest(sent, csrf), receive
        ctype = headers.get(b"content-type", b"").split(b";")[0].strip()
        if ctype != b"application/x-www-form-urlencoded":
            return False, receive
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_FORM_BYTES:
                return False, receive
        form = parse_qs(body.decode("utf-8", "replace"))
        token = (form.get("csrf_token") or [""])[0]
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return bool(token) and secrets.compare_digest(token, csrf), replay

    async def _reject(
        self, scope: Scope, send: Send, request_id: str, cookies: list[bytes]
    ) -> None:
        accept = dict(scope.get("headers", [])).get(b"accept", b"")
        msg = "This form has expired or was sent from another site (CSRF check failed). Reload the page and try again."
        if b"text/html" in accept:
            body = (
                "<!doctype html><html lang=en><meta charset=utf-8><title>Request refused</title>"
                f"<main><h1>Request refused</h1><p>{msg}</p><p><a href='/'>Back to lowbit</a></p></main></html>"
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
        hdrs += [(b"set-cookie", c) for c in cookies]
        await send({"type": "http.response.start", "status": 403, "headers": hdrs})
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
