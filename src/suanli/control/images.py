"""The image catalog: which images renters may pick, by name, and which is the default.

The catalog (``images`` table) is what the platform *offers*; whether the engine on a
host already holds an image is a separate fact (the API's ``present``), because a row
can be added before its image is pulled or built. Operators curate it; everyone reads
it. ``resolve`` is the one gate every instance, job and launch goes through, so an
unknown image is refused with the offered names before anything is created.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.control.auth import Principal
from suanli.control.lifecycle import JOB_ACTIVE
from suanli.db import keyset
from suanli.db.kept import kept
from suanli.db.models import Event, Image, Instance, Job
from suanli.db.session import Database
from suanli.errors import Conflict, Invalid, NotFound

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
#: the keys of ``contents``, and what each holds
CONTENT_KEYS = {"python": (str, type(None)), "cuda": (str, type(None)), "jupyterlab": (bool,), "sshd": (bool,)}
OPERATORS = ("admin", "operator")


def normalize_contents(contents: dict | None) -> dict:
    """``contents`` with every key present (missing: null / false); unknown keys or
    wrong types are refused, so the listing always reads the same."""
    contents = dict(contents or {})
    unknown = sorted(set(contents) - set(CONTENT_KEYS))
    if unknown:
        raise Invalid(f"unknown contents key(s) {', '.join(unknown)}; known: {', '.join(CONTENT_KEYS)}")
    out: dict = {}
    for key, types in CONTENT_KEYS.items():
        value = contents.get(key, False if bool in types else None)
        if not isinstance(value, types) or (isinstance(value, str) and not value.strip()):
            want = "true or false" if bool in types else "a version text or null"
            raise Invalid(f"contents.{key}: expected {want}, got {value!r}")
        out[key] = value.strip() if isinstance(value, str) else value
    return out


def list_images(db: Database) -> list[Image]:
    """The catalog, default first, then by name."""
    with db.sessions() as s:
        return _list(s)


def list_page(db: Database, page: keyset.Page) -> list[Image]:
    """One page of the catalog by name (``db.keyset``): a page cannot put the default
    first, since which image is the default changes while a renter pages."""
    with db.sessions() as s:
        return list(s.scalars(keyset.select_page(select(Image), [Image.name, Image.id], page)))


def _list(s: Session) -> list[Image]:
    return list(s.scalars(select(Image).order_by(Image.is_default.desc(), Image.name)))


def _check_name(name: str) -> None:
    if not NAME_RE.match(name or "") or len(name) > 100:
        raise Invalid(
            f"image name {name!r}: use lower-case letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (at most 100)"
        )


def add(
    db: Database, who: Principal, name: str, ref: str, description: str = "", contents: dict | None = None, default: bool = False
) -> Image:
    """Offer an image (operators). ``default`` makes it the one used when a request
    names none, and unsets the previous default in the same transaction."""
    who.require(*OPERATORS)
    _check_name(name)
    ref = (ref or "").strip()
    if not ref or any(c.isspace() for c in ref) or len(ref) > 300:
        raise Invalid(f"image ref {ref!r}: expected an engine reference such as localhost/suanli/python:3.11")
    contents = normalize_contents(contents)
    try:
        with db.transaction() as s:
            if s.scalar(select(Image.id).where(Image.name == name)) is not None:
                raise Conflict(f"image {name!r} exists", code="exists")
            # the first image offered becomes the default: a catalog always has one
            if default or s.scalar(select(Image.id).limit(1)) is None:
                default = True
                for other in s.scalars(select(Image).where(Image.is_default.is_(True))):
                    other.is_default = False
            row = Image(name=name, ref=ref, description=description or "", contents=contents, is_default=default)
            s.add(row)
            s.flush()
            s.add(
                Event(
                    kind="image",
                    object_id=row.id,
                    from_state=None,
                    to_state="added",
                    message=f"by {who.name}: {name} = {ref}{' (default)' if default else ''}",
                )
            )
            return row
    except IntegrityError:  # a concurrent add of the same name
        raise Conflict(f"image {name!r} exists", code="exists") from None


def set_default(db: Database, who: Principal, name: str) -> Image:
    """Make ``name`` the default image (operators)."""
    who.require(*OPERATORS)
    with db.transaction() as s:
        row = s.scalar(select(Image).where(Image.name == name))
        if row is None:
            raise NotFound(f"no image {name!r}")
        for other in s.scalars(select(Image).where(Image.is_default.is_(True), Image.id != row.id)):
            other.is_default = False
        row.is_default = True
        s.add(Event(kind="image", object_id=row.id, from_state=None, to_state="default", message=f"by {who.name}: {name}"))
        return row


def remove(db: Database, who: Principal, name: str) -> Image:
    """Stop offering an image (operators). Refused while a live instance or an active
    job uses it: their next start would have nothing to run. The engine's copy stays."""
    who.require(*OPERATORS)
    with db.transaction() as s:
        row = s.scalar(select(Image).where(Image.name == name))
        if row is None:
            raise NotFound(f"no image {name!r}")
        names = [row.name, row.ref]
        users = list(
            s.scalars(
                select(Instance.id).where(Instance.image.in_(names), Instance.state != "deleted").order_by(Instance.id).limit(5)
            )
        )
        if users:
            raise Conflict(
                f"image {name!r} is used by instance(s) {', '.join(map(str, users))}; delete them first", code="in_use"
            )
        active_jobs = [
            j.id for j in s.scalars(select(Job).where(Job.state.in_(JOB_ACTIVE))) if (j.spec or {}).get("image") in names
        ]
        if active_jobs:
            raise Conflict(f"image {name!r} is used by job(s) {', '.join(map(str, active_jobs[:5]))}", code="in_use")
        s.add(Event(kind="image", object_id=row.id, from_state=None, to_state="removed", message=f"by {who.name}: {name}"))
        s.delete(row)
        return row


def offered_text(rows: Sequence[Image | Offered]) -> str:
    return ", ".join(f"{r.name} (default)" if r.is_default else r.name for r in rows)


@dataclass(frozen=True)
class Offered:
    """An image as a request resolves it (what ``resolve`` keeps of a catalog row)."""

    name: str
    ref: str
    is_default: bool
    contents: Mapping[str, object]


def _offered(s: Session) -> tuple[Offered, ...]:
    return tuple(Offered(r.name, r.ref, r.is_default, MappingProxyType(dict(r.contents or {}))) for r in _list(s))


def resolve(session: Session, name: str | None) -> Offered:
    """The catalog row a request's ``image`` means: the default when None or empty,
    else the row of that name. Raises ``Invalid`` naming the offered images, so the
    caller refuses before it creates anything. Read once per process while the catalog
    is unchanged (``db.kept``)."""
    rows = kept(session, "images", _offered)
    if not rows:
        raise Invalid(
            "no images are offered here yet: an operator must add one (suanli images add, or suanli images build python)",
            code="no_images",
        )
    if not name:
        for r in rows:
            if r.is_default:
                return r
        raise Invalid(f"no default image is set; name one of: {offered_text(rows)}", code="unknown_image")
    for r in rows:
        if r.name == name:
            return r
    raise Invalid(f"image {name!r} is not offered here; offered: {offered_text(rows)}", code="unknown_image")


def seed_defaults(db: Database, engine_has: Callable[[str], bool]) -> list[str]:
    """At server start, on an empty catalog: offer the built-in images (python as the
    default, tiny), plus any optional built-in image (jupyter) the engine already holds.
    A catalog an operator has touched is left alone. Returns the names added."""
    from suanli.backends.local.imagebuild import RECIPES

    with db.transaction() as s:
        if s.scalar(select(Image.id).limit(1)) is not None:
            return []
        added = []
        for r in RECIPES.values():
            if not r.seeded and not engine_has(r.ref):
                continue
            s.add(
                Image(
                    name=r.name,
                    ref=r.ref,
                    description=r.description,
                    contents=normalize_contents(r.contents),
                    is_default=r.default,
                )
            )
            added.append(r.name)
        return added
