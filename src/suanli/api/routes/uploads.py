"""Uploads: a tenant's code archives (gzip tar), referenced by a task's ``code``.

``POST /v1/uploads`` takes the raw archive as the body (``application/gzip``) and streams
it to disk while counting and hashing, so a body over the server's cap is refused (413
``too_large``) as soon as the cap is passed, never buffered whole in memory. The answer's
``id`` is the archive's SHA-256: the CLI asks ``GET /v1/uploads/{id}`` first and skips
sending a tree the tenant already uploaded.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from suanli.api.context import ServerContext
from suanli.api.deps import context, principal
from suanli.api.errors import documented, http_error
from suanli.api.params import UploadId
from suanli.control import uploads
from suanli.control.auth import Principal
from suanli.errors import DomainError, Invalid

router = APIRouter(prefix="/v1/uploads", tags=["uploads"])

ACCEPTED_TYPES = ("application/gzip", "application/x-gzip", "application/octet-stream", "application/x-tar")


@http_error(415)
class UnsupportedType(DomainError):
    code = "unsupported_media_type"


class UploadOut(BaseModel):
    id: str
    size: int


class LimitOut(BaseModel):
    max_bytes: int
    max_unpacked_bytes: int


def max_upload_bytes(ctx: ServerContext) -> int:
    """The server's cap (``suanli server --max-upload-mib``), else the default."""
    return int(getattr(ctx, "max_upload_bytes", None) or uploads.DEFAULT_MAX_BYTES)


@router.get("/limit", response_model=LimitOut)
def limit(ctx: ServerContext = Depends(context), _: Principal = Depends(principal)) -> LimitOut:
    cap = max_upload_bytes(ctx)
    return LimitOut(max_bytes=cap, max_unpacked_bytes=cap * uploads.UNPACK_RATIO)


@router.get("/{upload_id}", response_model=UploadOut)
def get(upload_id: UploadId, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> UploadOut:
    return UploadOut(id=upload_id, size=uploads.size_of(ctx.data_dir, who.tenant_id, upload_id))


@router.post("", response_model=UploadOut, status_code=201, responses=documented(413, 415))  # over the cap; not gzip
async def upload(request: Request, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> UploadOut:
    cap = max_upload_bytes(ctx)
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype and ctype not in ACCEPTED_TYPES:
        raise UnsupportedType(f"send the archive as the raw body with Content-Type application/gzip, not {ctype}")
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise Invalid(f"bad Content-Length {declared!r}")
        if int(declared) > cap:
            raise uploads.too_large(cap, int(declared))
    writer = uploads.Writer(ctx.data_dir, who.tenant_id, cap)
    try:
        async for chunk in request.stream():
            # raises TooLarge (and drops the file) once past the cap; a disk write: off the event loop
            await run_in_threadpool(writer.write, chunk)
    except ClientDisconnect:
        writer.abort()
        raise Invalid("the upload was cut off before its end") from None
    except BaseException:
        writer.abort()
        raise
    info = await run_in_threadpool(writer.finish)  # gunzip and check every member: CPU work
    return UploadOut(id=info.id, size=info.size)
