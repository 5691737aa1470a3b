"""The console's actions (POST): retry a record, redrive a group, skip, edit and retry, rewind,
rebase. Operators only, with the session's CSRF token, from this console's own pages; each made
once per request token (`actions.Operator.once`) and logged."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from outboxkit.console import auth
from outboxkit.console.actions import ActionRefused, Logged
from outboxkit.console.site import Site, safe_next, same_origin, site_of, uncarried
from outboxkit.console.views import filters_of

router = APIRouter(prefix="/act")
Act = Callable[[Site, auth.User, str], Logged]


async def act(request: Request, consumer: str, run: Act) -> Response:
    """Run an action for the signed-in operator, once per request token, and say what it did."""
    site = site_of(request)
    user = site.user(request)
    form = await request.form()
    if user is None:
        return site.problem(request, None, 401, "sign in first")
    if not user.may_act:
        return site.problem(
            request, user, 403, f"{user.name} may look but not act: the operator role acts"
        )
    if not auth.csrf_ok(user, str(form.get("csrf", ""))) or not same_origin(request):
        return site.problem(
            request, user, 403, "the form is stale or came from another site: reload the page"
        )
    token = str(form.get("request", ""))
    try:
        done = await asyncio.to_thread(
            site.operator.once, consumer, user.name, token, lambda: run(site, user, token)
        )
    except ActionRefused as exc:
        return site.problem(request, user, 409, str(exc))
    back = safe_next(str(form.get("back", "/")) or "/")
    return site.page(request, user, "done.html", done=done, back=back)


@router.post("/retry")
async def retry(request: Request, consumer: str = Form(...), id: int = Form(...)) -> Response:
    """Redrive a parked record's key now."""
    return await act(request, consumer, lambda s, u, t: s.operator.retry(consumer, id))


@router.post("/redrive-group")
async def redrive_group(
    request: Request, consumer: str = Form(...), cause: str = Form(...)
) -> Response:
    """Redrive every key of a failure group (as filtered on its page). The cause comes
    base64-encoded (`carried`): a browser rewrites a carriage return in a form's value."""
    filters, _ = filters_of(await request.form())

    def redrive(site: Site, user: auth.User, token: str) -> Logged:
        return site.operator.redrive_group(consumer, uncarried(cause), filters)

    return await act(request, consumer, redrive)


@router.post("/skip")
async def skip(
    request: Request, consumer: str = Form(...), id: int = Form(...), reason: str = Form("")
) -> Response:
    """Give up on a parked record, with the reason."""
    return await act(
        request, consumer, lambda s, u, t: s.operator.skip(consumer, id, u.name, reason)
    )


@router.post("/edit")
async def edit(
    request: Request, consumer: str = Form(...), id: int = Form(...), payload: str = Form(...)
) -> Response:
    """Replace a parked record's payload and retry it; the original goes to the action log."""
    return await act(
        request, consumer, lambda s, u, t: s.operator.edit(consumer, id, payload, u.name, t)
    )


@router.post("/rewind")
async def rewind(
    request: Request,
    consumer: str = Form(...),
    topic: str = Form(...),
    partition: int = Form(...),
    offset: int = Form(...),
) -> Response:
    """Move a partition's watermark back."""
    return await act(
        request, consumer, lambda s, u, t: s.operator.rewind(consumer, topic, partition, offset)
    )


@router.post("/rebase")
async def rebase(
    request: Request,
    consumer: str = Form(...),
    topic: str = Form(...),
    reading: str = Form("start-over"),
    value: str = Form(""),
    partition: int | None = Form(None),
) -> Response:
    """Start over the partitions of a topic whose offsets moved, or resume a stopped one as
    its stop's runbook path says (as re-sends, a new history, the positions' database)."""
    return await act(
        request,
        consumer,
        lambda s, u, t: s.operator.rebase(consumer, topic, reading, value, partition),
    )
