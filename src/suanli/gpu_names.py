"""GPU model names: which catalog row a renter's or a node's spelling means.

Renters and inventories write "H100", "h100-sxm", "A100-80G" or "4090"; the catalog
(the advisor's datasheets, ``advisor/data/gpus.csv``) names rows "H100 SXM5 80GB".
A spelling resolves to a row when, ignoring case and punctuation, it is the row's
name; else through ``ALIASES`` (names that match several rows on purpose: "H100"
means the SXM part); else when every token of it occurs in exactly one row's name
(the SXM/OAM part preferred among several).

Every place that takes a GPU model from a user resolves it here, so ``a100``, ``A100``,
``A100-80G`` and ``A100 80GB SXM4`` mean one GPU everywhere: the advisor's catalog
(``catalog.find_gpu``, through ``resolve``), billing's price book (keyed by catalog names,
looked up by node model names, through ``lookup``), the control plane's requests (a
renter's spelling to the model a node registered, through ``match``) and grants
(``same``). The catalog's names are
read from the CSV as data; this module imports nothing from ``suanli``, so anything
may import it.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

#: Names that match several rows; the value is the row meant when a renter says it.
ALIASES: dict[str, str] = {
    "h100": "H100 SXM5 80GB",
    "h100sxm": "H100 SXM5 80GB",
    "a100": "A100 80GB SXM4",
    "a10080g": "A100 80GB SXM4",
    "a10080gb": "A100 80GB SXM4",
    "a10040g": "A100 40GB SXM4",
    "a800": "A800 SXM4 80GB",
    "h800": "H800 SXM5 80GB",
    "h200": "H200 SXM 141GB",
    "h20": "H20 96GB",
    "b200": "B200 (HGX, per GPU)",
    "910b": "Ascend 910B2",
    "ascend910b": "Ascend 910B2",
    "v100": "V100 SXM2 32GB",
    "p100": "P100 PCIe 16GB",
    "4090": "RTX 4090",
    "3090": "RTX 3090",
    "5090": "RTX 5090",
}


class UnknownGpu(LookupError):
    """A spelling that names no row, or several; the message lists the choices."""


def norm(text: str) -> str:
    """Lower case, letters and digits only: ``"A100-80G"`` -> ``"a10080g"``."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def resolve(name: str, names: Sequence[str]) -> str:
    """The one of ``names`` (catalog rows, in catalog order) that ``name`` means;
    ``UnknownGpu`` saying which names exist otherwise."""
    key = norm(name)
    if not key:
        raise UnknownGpu(f"unknown GPU model {name!r}")
    by_norm = {norm(n): n for n in names}
    if key in by_norm:
        return by_norm[key]
    if key in ALIASES:
        return by_norm[norm(ALIASES[key])]
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t]
    hits = [n for n in names if all(t in n.lower().replace(" ", "") for t in tokens)]
    if len(hits) > 1:
        # Prefer the SXM/OAM part, as the aliases do: it is what "H100" means in a rental listing.
        sxm = [n for n in hits if "SXM" in n]
        hits = sxm if len(sxm) == 1 else hits
    if len(hits) == 1:
        return hits[0]
    known = ", ".join(hits or names)
    what = "ambiguous" if hits else "unknown"
    raise UnknownGpu(f"{what} GPU model {name!r}; choose one of: {known}")


@lru_cache(maxsize=1)
def catalog_names() -> tuple[str, ...]:
    """The catalog's row names, in file order (the CSV's ``gpu`` column)."""
    text = resources.files("suanli").joinpath("advisor/data/gpus.csv").read_text("utf-8")
    return tuple(row["gpu"] for row in csv.DictReader(text.splitlines()))


def canonical(name: str) -> str:
    """The catalog row name ``name`` means (``"H100"`` -> ``"H100 SXM5 80GB"``)."""
    return resolve(name, catalog_names())


@lru_cache(maxsize=4096)
def canonical_or_none(name: str) -> str | None:
    """``canonical(name)``, or None for a name the catalog does not know (any name may
    be registered or priced: a model the datasheets lack is still a model)."""
    try:
        return canonical(name)
    except UnknownGpu:
        return None


def lookup(name: str, names: Sequence[str]) -> str | None:
    """The one of ``names`` (node models, price-book keys: any spellings) that means the
    same GPU as ``name``: itself, then the same letters and digits, then the same catalog
    row (``a100`` finds ``A100-80G``; ``910b`` finds ``Ascend-910B``). The first in
    ``names`` order when several spellings mean that row; None when none does."""
    if name in names:
        return name
    key = norm(name)
    for n in names:
        if norm(n) == key:
            return n
    want = canonical_or_none(name)
    if want is None:
        return None
    return next((n for n in names if canonical_or_none(n) == want), None)


def match(name: str, names: Sequence[str]) -> str:
    """``lookup``, or ``UnknownGpu`` naming the choices: what a command says to a renter
    who asked for a model the platform does not have."""
    hit = lookup(name, names)
    if hit is None:
        known = ", ".join(sorted(names)) or "none"
        raise UnknownGpu(f"unknown GPU model {name!r}; choose one of: {known}")
    return hit


def same(a: str, b: str) -> bool:
    """Whether two spellings name one GPU (a grant's model and a request's)."""
    return lookup(a, (b,)) is not None


__all__ = [
    "ALIASES",
    "UnknownGpu",
    "canonical",
    "canonical_or_none",
    "catalog_names",
    "lookup",
    "match",
    "norm",
    "resolve",
    "same",
]
