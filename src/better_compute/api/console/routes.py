"""The console's routes under /ui: sign-in and sign-out, five pages, their live fragments, and /ui/events.

/ui is public to the API-key middleware: the console authenticates by its own session cookie
(console/session.py), which a browser sends and a link cannot forge. Sign-in posts the key in a
form body (never a URL), with the sign-in form's own CSRF token (a post without the form's
pre-session cookie and token is 403 and signs no one in); a wrong key is 401 with no cookie set.
Sign-out is a POST carrying the session's CSRF token. A page asked with ?fragment=1 answers only its live part, which the script
swaps in when /ui/events says the tenant's Nodes changed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any, cast
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from better_compute.api.console import views
from better_compute.api.console.events import tenant_changes
from better_compute.api.console.session import (
    COOKIE,
    LIFETIME,
    SIGN_IN_COOKIE,
    SIGN_IN_LIFETIME,
    Session,
    Sessions,
)
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.http import compute_of
from better_compute.server import Compute

__all__ = ["closing", "router"]

router = APIRouter(prefix="/ui", include_in_schema=False)
_templates = Environment(
    loader=PackageLoader("better_compute.api.console", "templates"), autoescape=select_autoescape(default=True)
)
_STATIC = {
    name: (resources.files("better_compute.api.console").joinpath("static", name).read_bytes(), media)
    for name, media in (("console.js", "text/javascript"), ("console.css", "text/css"))
}
_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
PageData = Callable[..., Awaitable[dict[str, Any]]]


def _compute(request: Request) -> Compute:
    return cast(Compute, compute_of(request))  # create_app keeps the Compute there


def closing(app: Any) -> asyncio.Event:
    """The app's event that ends its /ui/events streams (set by api.serving.Server as it shuts down)."""
    event: asyncio.Event | None = getattr(app.state, "console_closing", None)
    if event is None:
        event = app.state.console_closing = asyncio.Event()
    return event


def _sessions(request: Request) -> Sessions:
    sessions: Sessions | None = getattr(request.app.state, "console_sessions", None)
    if sessions is None:
        sessions = request.app.state.console_sessions = Sessions(_compute(request))
    return sessions


def _html(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_templates.get_template(template).render(**context), status_code=status, headers=_HEADERS)


async def _form(request: Request) -> dict[str, str]:
    fields = parse_qs((await request.body()).decode("utf-8", errors="replace"), max_num_fields=8)
    return {name: values[0] for name, values in fields.items()}


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in _STATIC:
        return Response(status_code=404)
    body, media = _STATIC[name]
    return Response(body, media_type=media, headers={"Cache-Control": "public, max-age=300"})


def _sign_in_page(request: Request, status: int = 200, error: str | None = None) -> HTMLResponse:
    """The sign-in form, with its CSRF token and the pre-session cookie the token is bound to."""
    sessions = _sessions(request)
    nonce = sessions.sign_in_nonce()
    response = _html("sign_in.html", status, error=error, csrf=sessions.sign_in_token(nonce))
    response.set_cookie(
        SIGN_IN_COOKIE,
        nonce,
        max_age=int(SIGN_IN_LIFETIME.total_seconds()),
        path="/ui",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return response


@router.get("/sign-in")
async def sign_in_form(request: Request) -> HTMLResponse:
    return _sign_in_page(request)


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    form = await _form(request)
    if not _sessions(request).sign_in_allowed(request.cookies.get(SIGN_IN_COOKIE), form.get("csrf", "")):
        return _sign_in_page(request, 403, "The sign-in form was stale or not this console's: sign in again.")
    key = form.get("api_key", "").strip()
    try:
        principal = await _compute(request).iam.authenticate(key) if key else None
    except ComputeError as err:
        if err.code is not ErrorCode.PERMISSION_DENIED:
            raise
        principal = None
    if principal is None:
        return _sign_in_page(request, 401, "That API key was not accepted.")
    response = RedirectResponse("/ui/", status_code=303, headers=_HEADERS)
    response.set_cookie(
        COOKIE,
        _sessions(request).issue(principal.tenant_id, principal.key_id),
        max_age=int(LIFETIME.total_seconds()),
        path="/ui",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    response.delete_cookie(
        SIGN_IN_COOKIE, path="/ui", secure=request.url.scheme == "https", httponly=True, samesite="strict"
    )
    return response


async def _session(request: Request) -> Session | None:
    return await _sessions(request).open(request.cookies.get(COOKIE))


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    session = await _session(request)
    if session is not None and (await _form(request)).get("csrf") != session.csrf:
        return Response("the sign-out form is stale: reload the page", status_code=403, headers=_HEADERS)
    response = RedirectResponse("/ui/sign-in", status_code=303, headers=_HEADERS)
    response.delete_cookie(COOKIE, path="/ui", secure=request.url.scheme == "https", httponly=True, samesite="strict")
    return response


async def _page(request: Request, template: str, title: str, data: PageData, *args: Any) -> Response:
    session = await _session(request)
    if session is None:
        return RedirectResponse("/ui/sign-in", status_code=303, headers=_HEADERS)
    try:
        found = await data(_compute(request), session.tenant_id, *args)
    except ComputeError as err:
        if err.code is not ErrorCode.NOT_FOUND:
            raise
        return _html("not_found.html", 404, title="Not found", message=err.message, session=session, path="")
    fragment = request.query_params.get("fragment") == "1"
    live = request.url.include_query_params(fragment="1")
    status = 400 if found.get("error") is not None else 200  # a page's refused input (the decision log's filters)
    return _html(
        template,
        status,
        fragment=fragment,
        title=title,
        session=session,
        path=request.url.path,
        live=f"{live.path}?{live.query}",
        **found,
    )


@router.get("/")
async def fleet(request: Request) -> Response:
    return await _page(request, "fleet.html", "Fleet", views.fleet_page)


@router.get("/pools/{name}")
async def pool(request: Request, name: str) -> Response:
    return await _page(request, "pool.html", f"Pool {name}", views.pool_page, name)


@router.get("/reservations")
async def reservations(request: Request) -> Response:
    return await _page(request, "reservations.html", "Reservations", views.reservations_page)


@router.get("/doctor")
async def doctor(request: Request) -> Response:
    return await _page(request, "doctor.html", "Doctor", views.doctor_page)


@router.get("/decisions")
async def decisions(request: Request) -> Response:
    query = {name: request.query_params[name] for name in views.DECISION_FILTERS if name in request.query_params}
    return await _page(request, "decisions.html", "Decision log", views.decisions_page, query)


@router.get("/events")
async def events(request: Request) -> Response:
    """Server-sent events: `change` with the tenant's Node and pool ids whenever the change feed names one of them."""
    session = await _session(request)
    if session is None:
        return Response("sign in first", status_code=401, headers=_HEADERS)

    async def stream() -> AsyncIterator[str]:
        yield "retry: 2000\n\n"
        async for changed in tenant_changes(_compute(request), session.tenant_id, closing(request.app)):
            yield f"event: change\ndata: {json.dumps(changed)}\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream", headers={**_HEADERS, "X-Accel-Buffering": "no"})
