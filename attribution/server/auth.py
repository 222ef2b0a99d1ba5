"""Who is asking: a request's caller, by MUNGE credential, trusted proxy header or token.

In order (the first that the request carries decides; a bad credential is refused, never
passed over for a weaker one):

1. ``Authorization: MUNGE <credential>``: ``unmunge`` gives the uid of the process that made
   it; its payload must name this request (``attribution.munge.request_payload``). This is
   how ``sattr`` on a login node calls the server.
2. The configured ``server.proxy_header`` (say ``X-Remote-User``), believed only from the
   addresses in ``server.proxy_addresses``: a reverse proxy that did the login (Kerberos,
   OIDC, LDAP) names the user.
3. The server's token (``Authorization: Bearer``, the ``sattr_token`` cookie, or ``?token=``
   once, which sets the cookie): whoever started the server, who reads everything.

A caller is an administrator when root or a member of one of ``admin_groups``; the access
policy (``attribution.access``) is the same as the command line's.
"""

from __future__ import annotations

import grp
import hmac
import ipaddress
import os
import pwd
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import HTTPException, Request

from attribution.access import Caller
from attribution.config import Server
from attribution.munge import MungeError, decode, request_payload

COOKIE = "sattr_token"


@dataclass(frozen=True, slots=True)
class Identity:
    """The caller and how they proved it (``munge``, ``proxy``, ``token``)."""

    caller: Caller
    method: str


def caller_for_uid(uid: int, gid: int | None, admin_groups: Sequence[str]) -> Caller:
    """The caller with ``uid`` (``gid``: their primary group, from the passwd entry when
    None): an administrator when root or a member of one of ``admin_groups``."""
    try:
        entry = pwd.getpwuid(uid)
        name: str | None = entry.pw_name
        gid = entry.pw_gid if gid is None else gid
    except KeyError:
        name = None
    groups: set[str] = set()
    gids = set(os.getgrouplist(name, gid)) if name is not None and gid is not None else set()
    if gid is not None:
        gids.add(gid)
    for number in gids:
        try:
            groups.add(grp.getgrgid(number).gr_name)
        except KeyError:
            continue
    return Caller(uid=uid, name=name, admin=uid == 0 or bool(groups & set(admin_groups)))


def _trusted(peer: str | None, addresses: Sequence[str]) -> bool:
    if not peer:
        return False
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # an IPv4 proxy as a server on [::] sees it
    for item in addresses:
        try:
            if address in ipaddress.ip_network(item, strict=False):
                return True
        except ValueError:
            continue
    return False


class Authenticator:
    """Turns requests into callers for one server (its settings, admin groups and token)."""

    def __init__(self, settings: Server, admin_groups: Sequence[str], token: str | None) -> None:
        self.settings = settings
        self.admin_groups = list(admin_groups)
        self.token = token
        self.owner = Caller(uid=os.getuid(), name=_name(os.getuid()), admin=True)

    def identify(self, request: Request) -> Identity | None:
        """The request's caller, None when it carries no credential.

        Raises:
            HTTPException: 401 when it carries one that is refused.
        """
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "munge":
            return self._munge(request, value)
        if self.settings.proxy_header:
            users = request.headers.getlist(self.settings.proxy_header)
            peer = request.client.host if request.client else None
            if users and _trusted(peer, self.settings.proxy_addresses):
                if len(users) > 1:  # a proxy that adds its header to the client's own
                    raise HTTPException(
                        401, f"{self.settings.proxy_header} given more than once: refused"
                    )
                return self._proxy(users[0])
        if self.token is not None:
            given = (
                value.strip()
                if scheme.lower() == "bearer"
                else request.cookies.get(COOKIE) or request.query_params.get("token")
            )
            if given:
                if hmac.compare_digest(given.encode(), self.token.encode()):
                    return Identity(self.owner, "token")
                raise HTTPException(401, "wrong token")
        return None

    def _munge(self, request: Request, credential: str) -> Identity:
        if not self.settings.munge:
            raise HTTPException(401, "MUNGE credentials are not accepted by this server")
        try:
            decoded = decode(
                credential, socket=self.settings.munge_socket, timeout=self.settings.timeout
            )
        except MungeError as exc:
            raise HTTPException(401, str(exc)) from None
        # the path as sent, %-escapes and all (the client names that in its credential)
        raw = request.scope.get("raw_path")
        path = raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
        root = request.scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :]  # behind a proxy that serves us under a prefix
        path += f"?{request.url.query}" if request.url.query else ""
        if decoded.payload != request_payload(request.method, path):
            raise HTTPException(401, "the MUNGE credential was made for another request")
        return Identity(caller_for_uid(decoded.uid, decoded.gid, self.admin_groups), "munge")

    def _proxy(self, user: str) -> Identity:
        try:
            entry = pwd.getpwnam(user.strip())
        except (KeyError, ValueError):
            raise HTTPException(401, f"the proxy named an unknown user {user[:64]!r}") from None
        caller = caller_for_uid(entry.pw_uid, entry.pw_gid, self.admin_groups)
        return Identity(caller, "proxy")


def _name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


__all__ = ["COOKIE", "Authenticator", "Identity", "caller_for_uid"]
