"""SSH keys of the signed-in user: add, list, delete.

Every change is pushed to the user's running instances at once, so a removed
key stops opening them without a restart."""

from __future__ import annotations

from datetime import datetime
from functools import partial

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from suanli.api.context import ServerContext
from suanli.api.deps import context, principal
from suanli.api.paging import PAGED, Paging, paging, respond
from suanli.api.params import NamePath
from suanli.api.threads import backend_call
from suanli.bounds import Text
from suanli.control import keys
from suanli.control.auth import Principal
from suanli.db.models import SshKey

router = APIRouter(prefix="/v1/keys", tags=["keys"])


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    public_key: Text = Field(
        min_length=1,
        max_length=keys.MAX_TEXT + 1,
        description="one OpenSSH public key line, e.g. the content of ~/.ssh/id_ed25519.pub",
    )
    name: Text = Field(default="", max_length=keys.NAME_MAX, description="a label; default: the key's comment")


class KeyOut(BaseModel):
    id: int
    name: str
    type: str = Field(description="ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa, ...")
    fingerprint: str = Field(description="SHA256:..., as `ssh-keygen -lf FILE` prints it")
    public_key: Text = Field(description="the stored, normalised line")
    created_at: datetime


def key_out(row: SshKey) -> KeyOut:
    return KeyOut(
        id=row.id,
        name=row.name,
        type=keys.key_type(row.public_key),
        fingerprint=row.fingerprint,
        public_key=row.public_key,
        created_at=row.created_at,
    )


@router.post("", response_model=KeyOut, status_code=201)
async def add(body: KeyCreate, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> KeyOut:
    # on the backend's threads (api.threads): the key is pushed into the renter's running instances
    push = partial(keys.push_keys, ctx.db, ctx.backends)
    return key_out(await backend_call(keys.add, ctx.db, who, body.public_key, body.name, on_change=push))


@router.get("", response_model=list[KeyOut], responses=PAGED)
def list_(
    request: Request,
    response: Response,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[KeyOut]:
    """Your keys by id, a page at a time."""
    page = paged.page("keys", (int,))
    return [key_out(r) for r in respond(request, response, "keys", keys.list_(ctx.db, who, page), page, lambda r: (r.id,))]


@router.delete("/{key_id:path}", response_model=KeyOut)
async def delete(key_id: NamePath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> KeyOut:
    """``key_id``: the key's id, or its ``SHA256:...`` fingerprint (URL-encoded)."""
    push = partial(keys.push_keys, ctx.db, ctx.backends)  # on the backend's threads, as ``add``
    return key_out(await backend_call(keys.remove, ctx.db, who, key_id, on_change=push))
