"""Path and query parameters every router shares, bounded as ``suanli.bounds`` says: an id
in the database's integer range, a name without NUL, a tenant by name or id. A route
declares ``instance_id: IdPath``; FastAPI answers 422 for anything else before the handler
runs, and the schema shows the bounds."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator

from suanli.bounds import DB_INT_MAX, NUL_PATTERN, no_nul

#: the NUL rule in the schema; ``no_nul`` checks it, with a message that says so
NUL = {"pattern": NUL_PATTERN}


def _no_nul_or_none(value: str | None) -> str | None:
    return value if value is None else no_nul(value)


#: ``/{..._id}``: a row's id (PostgreSQL INTEGER)
IdPath = Annotated[int, Path(ge=1, le=DB_INT_MAX, description="the id (1..2147483647)")]

#: ``/{name}``: a node's or an image's name; one that does not exist is a 404
NamePath = Annotated[str, Path(min_length=1, max_length=200, json_schema_extra=NUL), AfterValidator(no_nul)]

#: ``?tenant=``: a tenant's name or id; none: the caller's own
TenantQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=100,
        json_schema_extra=NUL,
        description="a tenant's name or id; default: your own (a member may name only its own)",
    ),
    AfterValidator(_no_nul_or_none),
]

#: an optional id in a query (``?object_id=``)
IdQuery = Annotated[int | None, Query(ge=1, le=DB_INT_MAX)]

#: ``?state=``, ``?kind=``: a filter's text (a value no row has matches none)
TextQuery = Annotated[str | None, Query(max_length=100, json_schema_extra=NUL), AfterValidator(_no_nul_or_none)]

#: ``?tail_bytes=``: the last bytes of a log
LogTail = Annotated[int | None, Query(ge=1, le=DB_INT_MAX, description="only the last this many bytes")]

#: ``/v1/uploads/{upload_id}``: an upload's id, the SHA-256 of its archive
UploadId = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="the archive's SHA-256, hex")]

#: where a workload's metrics history starts (``GET /v1/{instances,jobs}/ID/metrics``)
MetricsSince = Annotated[
    float | None,
    Query(ge=0, le=1e11, description="epoch seconds; default: the last hour. Older than an hour: five-minute averages"),
]
