"""What every route of ``sattr serve`` shares: the configuration, the store's path, the
authenticator and the ruleset, with the FastAPI dependencies that hand them out."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request

from attribution.access import Caller
from attribution.config import Config
from attribution.errors import AttributionError, StoreError
from attribution.server.auth import Authenticator, Identity
from attribution.store import Store


@dataclass(slots=True)
class ServerState:
    """One server's settings. ``ruleset`` is loaded at start (``POST /api/v1/diagnose`` uses
    it); ``slots`` bounds the diagnoses of uploads that run at once."""

    config: Config
    store: Path
    auth: Authenticator
    ruleset: Any
    slots: threading.BoundedSemaphore = field(init=False)

    def __post_init__(self) -> None:
        self.slots = threading.BoundedSemaphore(self.config.server.diagnose_slots)


def server_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.attribution
    return state


State = Annotated[ServerState, Depends(server_state)]


def identity(request: Request, state: State) -> Identity:
    """The caller; a request without a credential is refused with 401."""
    found = state.auth.identify(request)
    if found is None:
        raise HTTPException(
            401,
            "authentication required: a MUNGE credential (sattr does this), the trusted"
            " proxy's user header, or the server's token",
            headers={"WWW-Authenticate": 'MUNGE, Bearer realm="sattr"'},
        )
    return found


def caller(who: Annotated[Identity, Depends(identity)]) -> Caller:
    return who.caller


def admin(who: Annotated[Identity, Depends(identity)]) -> Caller:
    """An administrator; anyone else is refused with 403."""
    if not who.caller.admin:
        raise HTTPException(
            403, "administrators only (root or admin_groups): this view spans every user's jobs"
        )
    return who.caller


@contextmanager
def open_store(state: ServerState) -> Iterator[Store]:
    """The verdict store, opened for reading in the calling thread (SQLite connections stay
    in the thread that made them) for one request; 503 when it cannot be read."""
    try:
        opened = Store(state.store, readonly=True)
    except AttributionError as exc:
        raise HTTPException(503, f"the verdict store cannot be read: {exc}") from None
    try:
        yield opened
    except StoreError as exc:
        raise HTTPException(503, str(exc)) from None
    finally:
        opened.close()


Who = Annotated[Caller, Depends(caller)]
Admin = Annotated[Caller, Depends(admin)]

__all__ = [
    "Admin",
    "ServerState",
    "State",
    "Who",
    "admin",
    "caller",
    "identity",
    "open_store",
    "server_state",
]
