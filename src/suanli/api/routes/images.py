"""Images: the catalog renters pick from (``GET``), curated by operators (``POST``,
``PATCH``, ``DELETE``). ``present`` says whether this server's container engine holds
the image now, asked once per listing; null where the server has no engine to ask."""

from __future__ import annotations

import time
from datetime import datetime
from functools import lru_cache

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from suanli.api.context import ServerContext
from suanli.api.deps import context, principal
from suanli.api.paging import PAGED, Paging, paging, respond
from suanli.api.params import NamePath
from suanli.backends.local import imagebuild
from suanli.bounds import Text
from suanli.control import images
from suanli.control.auth import Principal
from suanli.db.models import Image
from suanli.errors import Invalid

router = APIRouter(prefix="/v1/images", tags=["images"])


class ImageContents(BaseModel):
    model_config = ConfigDict(extra="forbid")
    python: Text | None = Field(default=None, max_length=20, description="Python version inside, e.g. 3.11")
    cuda: Text | None = Field(default=None, max_length=20, description="CUDA version inside, e.g. 12.4")
    jupyterlab: bool = False
    sshd: bool = Field(default=False, description="has OpenSSH's sshd: `suanli ssh`, scp and sftp work")


class ImageCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(
        min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9._-]*$", description="what renters write in `--image` / `image:`"
    )
    ref: Text = Field(min_length=1, max_length=300, description="the engine's reference, e.g. localhost/suanli/python:3.11")
    description: Text = Field(default="", max_length=2000)
    contents: ImageContents = Field(default_factory=ImageContents)
    default: bool = Field(default=False, description="use it when a request names no image (unsets the previous default)")


class ImageUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default: bool = Field(description="true: make this the default image")


class ImageOut(BaseModel):
    name: str
    ref: str
    description: str
    default: bool
    contents: ImageContents
    present: bool | None = Field(description="the engine holds it now; null: this server has no engine to ask")
    created_at: datetime


@lru_cache(maxsize=1)
def _engine() -> str | None:
    return imagebuild.detect_engine()


_refs_cache: tuple[float, set[str] | None] = (0.0, None)


def _present_refs() -> set[str] | None:
    """The engine's image refs, cached for two seconds (a listing under load asks once)."""
    global _refs_cache
    if time.monotonic() - _refs_cache[0] < 2.0:
        return _refs_cache[1]
    engine = _engine()
    refs = imagebuild.local_refs(engine) if engine else None
    _refs_cache = (time.monotonic(), refs)
    return refs


def _out(row: Image, refs: set[str] | None) -> ImageOut:
    return ImageOut(
        name=row.name,
        ref=row.ref,
        description=row.description,
        default=row.is_default,
        contents=ImageContents(**images.normalize_contents(row.contents)),
        present=None if refs is None else row.ref in refs,
        created_at=row.created_at,
    )


@router.get("", response_model=list[ImageOut], responses=PAGED)
def list_(
    request: Request,
    response: Response,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[ImageOut]:
    """The catalog by name, a page at a time (``default`` marks the default image)."""
    page = paged.page("images", (str, int))
    rows = respond(request, response, "images", images.list_page(ctx.db, page), page, lambda r: (r.name, r.id))
    refs = _present_refs()
    return [_out(r, refs) for r in rows]


@router.post("", response_model=ImageOut, status_code=201)
def add(body: ImageCreate, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> ImageOut:
    row = images.add(ctx.db, who, body.name, body.ref, body.description, body.contents.model_dump(), body.default)
    _forget_refs()
    return _out(row, _present_refs())


@router.patch("/{name}", response_model=ImageOut)
def update(
    name: NamePath, body: ImageUpdate, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> ImageOut:
    if not body.default:
        raise Invalid("to change the default, set it on another image (default: true)")
    return _out(images.set_default(ctx.db, who, name), _present_refs())


@router.delete("/{name}", response_model=ImageOut)
def remove(name: NamePath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> ImageOut:
    return _out(images.remove(ctx.db, who, name), _present_refs())


def _forget_refs() -> None:
    """An operator just added an image, perhaps right after building it: ask again."""
    global _refs_cache
    _refs_cache = (0.0, None)
