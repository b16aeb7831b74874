"""Pure parsers for Slurm 22.05's text fragments and ``--json`` documents.

No I/O here: ``client.py`` runs the commands and hands their output to these functions,
so they are tested on JSON captured from the real daemons (``tests/slurm/data/``).

Field names are those of the openapi v0.0.38 data_parser that Debian 12's Slurm 22.05.8
prints (``meta.plugin.type == "openapi/v0.0.38"``). Later Slurm releases renamed many of
them; ``check_schema`` refuses other schemas loudly instead of misreading them.
Note: in 22.05 ``squeue --json`` and ``sinfo --json`` ignore filter options (-j, -n, -t),
so callers filter the parsed lists themselves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from suanli.backends.slurm.model import ExitStatus, Gres, SlurmJob, SlurmNode

SUPPORTED_PLUGINS = frozenset({"openapi/v0.0.38", "openapi/dbv0.0.38"})

_HOSTLIST_PART = re.compile(r"([^,\[]+)(?:\[([^\]]+)\])?")
_GRES_ITEM = re.compile(r"^(?P<body>[^()]+?)(?:\((?P<extra>[^)]*)\))?$")


class SlurmParseError(ValueError):
    """Slurm printed something this parser does not understand."""


def check_schema(doc: Mapping[str, Any]) -> None:
    """Refuse JSON from a Slurm whose schema these parsers were not written for."""
    plugin = doc.get("meta", {}).get("plugin", {}).get("type")
    if plugin not in SUPPORTED_PLUGINS:
        raise SlurmParseError(f"unsupported Slurm JSON schema {plugin!r}; expected one of {sorted(SUPPORTED_PLUGINS)}")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmParseError(f"Slurm reported errors: {errors}")


def expand_hostlist(expr: str) -> tuple[str, ...]:
    """``"node[1-3,5],gpu7"`` -> ``("node1", "node2", "node3", "node5", "gpu7")``.

    Zero padding is kept (``n[08-10]`` -> n08 n09 n10), as Slurm does.
    """
    out: list[str] = []
    expr = expr.strip()
    pos = 0
    while pos < len(expr):
        m = _HOSTLIST_PART.match(expr, pos)
        if not m:
            raise SlurmParseError(f"bad hostlist {expr!r}")
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            out.append(prefix)
        else:
            out.extend(prefix + suffix for suffix in _expand_ranges(ranges, padded=True))
        pos = m.end()
        if pos < len(expr):
            if expr[pos] != ",":
                raise SlurmParseError(f"bad hostlist {expr!r}")
            pos += 1
    return tuple(out)


def _expand_ranges(spec: str, padded: bool = False) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise SlurmParseError(f"bad range {spec!r}")
        width = len(lo) if padded else 0
        for i in range(int(lo), int(hi or lo) + 1):
            out.append(str(i).zfill(width))
    return out


def parse_index_list(spec: str) -> tuple[int, ...]:
    """``"0-1,4"`` -> ``(0, 1, 4)``; ``"N/A"`` or ``""`` -> ``()``."""
    if spec in ("", "N/A"):
        return ()
    return tuple(int(i) for i in _expand_ranges(spec))


def parse_gres_item(item: str) -> tuple[str, str | None, int, tuple[int, ...]]:
    """One GRES entry: ``"gpu:a100:2(IDX:0-1)"`` -> ``("gpu", "a100", 2, (0, 1))``.

    Accepts the spellings Slurm uses in node ``gres``/``gres_used``, job ``gres_detail`` and
    ``tres_per_node`` (``"gres:gpu:a100:2"``); a missing count means 1; ``(S:0-1)`` socket
    hints are ignored.
    """
    m = _GRES_ITEM.match(item.strip())
    if not m:
        raise SlurmParseError(f"bad GRES {item!r}")
    parts = m.group("body").split(":")
    if parts[0] == "gres":
        parts = parts[1:]
    if not parts or not parts[0]:
        raise SlurmParseError(f"bad GRES {item!r}")
    name, gtype, count = parts[0], None, 1
    rest = parts[1:]
    if rest and rest[-1].isdigit():
        count = int(rest.pop())
    if rest:
        gtype = ":".join(rest)
    indices: tuple[int, ...] = ()
    extra = m.group("extra") or ""
    if extra.startswith("IDX:"):
        indices = parse_index_list(extra[4:])
    return name, gtype, count, indices


def split_gres(spec: str) -> list[str]:
    """Split a GRES list at top-level commas (commas inside ``(IDX:0,2)`` stay)."""
    items, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        items.append(cur)
    return [i for i in (s.strip() for s in items) if i and i not in ("(null)", "N/A")]


def parse_node_gres(gres: str, gres_used: str = "") -> tuple[Gres, ...]:
    """A node's ``gres`` and ``gres_used`` strings -> one ``Gres`` per (name, type)."""
    used: dict[tuple[str, str | None], tuple[int, tuple[int, ...]]] = {}
    for item in split_gres(gres_used):
        name, gtype, count, idx = parse_gres_item(item)
        used[(name, gtype)] = (count, idx)
    out = []
    for item in split_gres(gres):
        name, gtype, count, _ = parse_gres_item(item)
        u, idx = used.get((name, gtype), (0, ()))
        out.append(Gres(name=name, type=gtype, count=count, used=u, used_indices=idx))
    return tuple(out)


def parse_tres(spec: str | None) -> dict[str, int]:
    """``"cpu=2,mem=2G,gres/shard=10"`` -> ``{"cpu": 2, "mem": 2048, "gres/shard": 10}`` (mem in MiB)."""
    out: dict[str, int] = {}
    for part in (spec or "").split(","):
        key, sep, value = part.partition("=")
        if not sep:
            continue
        out[key.strip()] = _tres_value(key.strip(), value.strip())
    return out


_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


def _tres_value(key: str, value: str) -> int:
    if value and value[-1].upper() in _UNITS:
        num, unit = float(value[:-1]), _UNITS[value[-1].upper()]
        return int(round(num * unit))  # mem and other sizes in MiB
    return int(float(value))


def parse_sinfo(doc: Mapping[str, Any]) -> list[SlurmNode]:
    """``sinfo --json`` -> one ``SlurmNode`` per node (sorted by name, deduplicated)."""
    check_schema(doc)
    nodes: dict[str, SlurmNode] = {}
    for n in doc.get("nodes", []):
        nodes[n["name"]] = SlurmNode(
            name=n["name"],
            state=str(n.get("state", "unknown")).lower(),
            flags=tuple(n.get("state_flags") or ()),
            reason=n.get("reason") or "",
            cpus=int(n.get("cpus") or 0),
            alloc_cpus=int(n.get("alloc_cpus") or 0),
            memory_mb=int(n.get("real_memory") or 0),
            alloc_memory_mb=int(n.get("alloc_memory") or 0),
            gres=parse_node_gres(n.get("gres") or "", n.get("gres_used") or ""),
            partitions=tuple(n.get("partitions") or ()),
            tres_used=parse_tres(n.get("tres_used")),
        )
    return [nodes[k] for k in sorted(nodes)]


def job_gpu_indices(nodes: tuple[str, ...], gres_detail: list[str]) -> dict[str, tuple[int, ...]]:
    """Pair ``gres_detail`` (one string per node, in node order) with the job's nodes."""
    out: dict[str, tuple[int, ...]] = {}
    for node, detail in zip(nodes, gres_detail):
        idx: list[int] = []
        for item in split_gres(detail):
            name, _, _, indices = parse_gres_item(item)
            if name in ("gpu", "shard"):
                idx.extend(i for i in indices if i not in idx)
        out[node] = tuple(sorted(idx))
    return out


def parse_squeue(doc: Mapping[str, Any]) -> list[SlurmJob]:
    """``squeue --json`` -> jobs (all of them: 22.05 ignores squeue's filters)."""
    check_schema(doc)
    jobs = []
    for j in doc.get("jobs", []):
        nodes = expand_hostlist(j["nodes"]) if j.get("nodes") else ()
        jobs.append(
            SlurmJob(
                job_id=int(j["job_id"]),
                name=j.get("name") or "",
                state=str(j.get("job_state", "")).upper(),
                reason=j.get("state_reason") or "",
                nodes=nodes,
                partition=j.get("partition") or "",
                qos=j.get("qos") or "",
                requeue=bool(j.get("requeue")),
                restarts=int(j.get("restart_cnt") or 0),
                exit=ExitStatus.from_wait_status(int(j.get("exit_code") or 0)),
                submit_time=int(j.get("submit_time") or 0),
                start_time=int(j.get("start_time") or 0),
                end_time=int(j.get("end_time") or 0),
                gpu_indices=job_gpu_indices(nodes, list(j.get("gres_detail") or [])),
                tres_per_node=j.get("tres_per_node") or "",
                required_nodes=expand_hostlist(j["required_nodes"]) if j.get("required_nodes") else (),
                standard_output=j.get("standard_output") or "",
                comment=j.get("comment") or "",
            )
        )
    return jobs


def _sacct_exit(e: Mapping[str, Any] | None) -> ExitStatus:
    if not e:
        return ExitStatus()
    signal = (e.get("signal") or {}).get("signal_id") or 0
    return ExitStatus(code=int(e.get("return_code") or 0), signal=int(signal))


def parse_sacct(doc: Mapping[str, Any]) -> list[SlurmJob]:
    """``sacct --json`` -> one record per job run, oldest first.

    A requeued job has several records under one job id (one per run, e.g. NODE_FAIL then
    RUNNING); ``latest_runs`` keeps the newest of each.
    """
    check_schema(doc)
    jobs = []
    for j in doc.get("jobs", []):
        nodes = expand_hostlist(j["nodes"]) if j.get("nodes") and j["nodes"] != "None assigned" else ()
        t = j.get("time") or {}
        state = j.get("state") or {}
        jobs.append(
            SlurmJob(
                job_id=int(j["job_id"]),
                name=j.get("name") or "",
                state=str(state.get("current", "")).upper(),
                reason=state.get("reason") or "",
                nodes=nodes,
                partition=j.get("partition") or "",
                qos=j.get("qos") or "",
                requeue=False,
                restarts=0,
                exit=_sacct_exit(j.get("exit_code")),
                submit_time=int(t.get("submission") or 0),
                start_time=int(t.get("start") or 0),
                end_time=int(t.get("end") or 0),
                comment=((j.get("comment") or {}).get("job") or ""),
            )
        )
    jobs.sort(key=lambda r: (r.job_id, r.submit_time, r.start_time))  # a requeue's submit time is the requeue
    return jobs


def latest_runs(records: list[SlurmJob]) -> dict[int, SlurmJob]:
    """The newest accounting record of each job id."""
    out: dict[int, SlurmJob] = {}
    for r in records:
        cur = out.get(r.job_id)
        if cur is None or (r.submit_time, r.start_time) >= (cur.submit_time, cur.start_time):
            out[r.job_id] = r
    return out


def parse_sbatch_parsable(stdout: str) -> int:
    """``sbatch --parsable`` prints ``"<jobid>"`` or ``"<jobid>;<cluster>"``."""
    first = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = first.split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmParseError(f"sbatch printed no job id: {stdout!r}")
    return int(job_id)
