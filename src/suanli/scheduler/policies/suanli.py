"""Suanli's default policy: FGD, with ties broken by scarce GPU models and stranded
capacity, and shares packed by the patterns of the mix's best packing.

The primary key is FGD's (``fgd.py``): the integer ``floor(100 * sigmoid(dF / 1000))``
score of the target workload's expected fragmentation. Because that score is
quantised, many nodes tie, and FGD leaves the tie to the seeded node order. Ties are
the rule, not the exception: a CPU-only pod changes no node's fragmentation until the
cluster is nearly full, so nearly every node scores 50, and a whole-GPU pod ties on
every node that has a free GPU and enough CPU. Keys 1-4 keep FGD's score and break its
ties with facts about the future that FGD's per-node, count-weighted fragmentation does
not see; only what is still tied after them goes to the seeded node order, which keeps
FGD's packing. Two keys also rank outside FGD's score: key 1 above it where a request
takes every GPU of a node, and key 5 above and below it, for shares. Key 6 ranks among
the tie-breaks, after key 1 and before key 4.

1. **Scarce GPU models** (GPU requests). Some requests of the mix can run only on a
   small part of the cluster: a model list (``gpu_spec``), or a shape that only some
   nodes can hold (8 GPUs and 120 cores fit only the 128-core G3 nodes). A request is
   restricted when the GPUs it can use (allowed model, enough GPUs and CPU on one
   node) are under ``RESTRICTED_ROOM`` of the cluster's. A model's pressure is the
   share of its GPUs those requests will want by the time the mix has asked for the
   cluster's whole capacity (each spread evenly over the GPUs it can use). A GPU request
   prefers the models with the least pressure, compared in steps of
   ``PRESSURE_STEP`` of their capacity, leaving scarce models to the requests that have
   nowhere else to go. Models within a step tie: a model that restricted requests will
   fill to a tenth is not scarce. The first version ranked every difference (on
   g-gpuspec15 G2 and G3 differed by 0.5 % of their GPUs) and cost 0.39 points there
   against the key off; in steps it costs 0.22. Whether the key gains depends on the
   draw of the mix, not on the pressure alone (issue 16, fourth pass, BENCHMARKS.md),
   so the policy keeps it only when a rehearsal says it helps: a fill of the mix on an
   empty half of the cluster with the key and one without (``rehearsal.py``), once.
   ``suanli_online``, which learns its mix, keeps the key until it has learned from
   ``LEARNED_MIX_REQUESTS`` requests and rehearses then (the live loop shows it that
   many served ones on start). With no restricted request in the mix this key does
   nothing and nothing is rehearsed. Where a whole-GPU request takes every GPU of a
   node, the key ranks above FGD's score: FGD tells empty nodes of different models
   apart by how fragmented each is for the mix, and one quantum of its score (88
   against 87 on g-mix-all's learned mix) sent 8-GPU requests to the G3 nodes its
   120-core 8-GPU requests needed. On the traces with pressure, seeds 42-51:
   ``suanli`` +0.075 points on average over the 23 whose decisions it changes (13
   better, 10 worse, at worst -0.224 on u-gpuspec30, still 0.31 above ``fgd``),
   ``suanli_online`` +0.042 over 37 (26 better, 10 worse, at worst -0.049); no trace
   fell below ``fgd`` (issue 16, session 45, BENCHMARKS.md).

2. **CPU and memory for the idle GPUs** (CPU-only and whole-GPU requests). A GPU is
   only usable with CPU and memory next to it. Let r be the mix's CPU per GPU milli and
   m its memory per GPU milli (over the GPU requests allowed on the node's model; m is
   the mean memory of each shape's requests, ``TargetWorkload.memory_mib``). After the
   placement a node keeps a surplus if its free CPU is at least r times its idle GPU
   milli and its free memory at least m times. A CPU-only pod prefers a node with
   no idle GPU at all (that CPU can serve nothing else), then a node that keeps a
   surplus, then the rest. A whole-GPU pod prefers a node that keeps a surplus. On the
   Alibaba nodes CPU per GPU ranges from 12 cores (8-GPU G2) to 52 (2-GPU T4), so the
   first-fit order of FGD's tie-break otherwise spends the CPU of CPU-poor nodes and
   strands their last free GPUs. Memory is as tight: a G2 node has 12 cores and 48 GiB
   per GPU, the default trace's GPU requests ask for 11 and 39. Adding memory gained
   0.017 points on average over the 61 traces whose decisions it changes, seeds 42-51
   (39 better, 22 worse, at worst -0.048 on t-mix-all; decided on eight traces, six
   shipped, +0.018 on the 53 others; issue 16, session 46). The part for CPU-only
   pods is key "cpu", the part for whole-GPU pods key "cpu_gpu" (they gain and lose
   on different mixes). Both are off when the mix is CPU-bound: when the CPU it asks
   for at full GPU allocation exceeds ``CPU_BOUND`` (1.1) times the cluster's CPU,
   the CPU kept next to idle GPUs will be taken by CPU-only work anyway, and the key
   only moved work off FGD's order (cpu300: -0.68 points against fgd with it, -0.17
   without).

3. **Idle GPUs left usable** (sharing requests). A sharing pod may go to any GPU with
   room, and FGD scores every such GPU of a node. Among the GPUs (and nodes) tied on
   FGD's score, the policy prefers a placement after which the node either has no idle
   GPU milli left or can still host at least one GPU request of the mix (enough GPUs
   with enough free milli, enough CPU, an allowed model). The other kind of placement
   strands what the node has left: no request of the mix can use it, and FGD's
   count-weighted, quantised score often does not tell the two apart. This key ranks
   above key 1 for sharing pods. At the end of the fill almost all idle capacity is
   gaps on shared GPUs, so it matters most on mixes with few CPU-only and many
   multi-GPU pods (multigpu40), where keys 1 and 2 have little to work with.

4. **Whole nodes kept for node-sized requests** (sharing requests; key "whole"). When
   the mix holds node-sized requests (multi-GPU requests for every GPU of the largest
   nodes: 8-GPU pods on the Alibaba cluster), a sharing pod prefers a placement that
   does not take away a node's room for them: it could host one before and cannot
   after. FGD does count that loss, but weighted by those requests' small share of
   the mix's count it rarely moves the integer score, so a share opened an untouched
   8-GPU node as readily as a used one. The key ranks last, under key 1: ranked above
   it, it sent shares to small nodes of scarce models (every node that could never
   host a node-sized request "keeps" its room) and cost 0.72 and 0.30 points on
   gpuspec10 and gpuspec25. On g-multigpu10 (the default trace plus 8-GPU, 88-core
   pods) it turned -0.071 against fgd into +0.065 (10 seeds, issue 16, third pass);
   the same key on whole-GPU pods gained there too but cost 0.05 points on
   multigpu20, and on CPU-only pods it changed nothing, so it applies to sharing pods
   only.

5. **Shares packed by the patterns of the mix's best packing** (sharing requests; key
   "patterns", ``patterns.py``). The linear program of the cutting-stock problem over
   the mix's share sizes says which sizes fill a GPU together and how many GPUs of each
   combination the mix needs per share. A GPU a share opens is planned as the combination
   furthest behind its rate, and a share goes first to a GPU whose plan still misses its
   size (or one up to ``patterns.TOLERANCE`` larger), above FGD's score; a share
   without a slot goes where FGD and keys 1-4 say, but not to a GPU another plan waits
   on while any other node can take it (below FGD's score), unless shares ask for over
   ``KEEP_PLANNED_SHARES`` of the mix's GPU milli. FGD puts a share where the
   gap left now looks least fragmented, Best Fit's rule, and at the end of a fill leaves
   GPUs whose gaps no share fills. Chosen on the 20 shipped traces (issue 16, session
   43, BENCHMARKS.md). The key is off while restricted requests alone want a GPU model
   whole (key 1's pressure at least ``OVERSUBSCRIBED``): there the scarce model decides
   what is allocated, and the key lost 0.24-0.31 points on every such mix tried.

6. **Memory kept for the idle GPUs, on mixes of shares** (sharing requests; key
   "share_memory"). Where shares ask for at least ``SHARE_MEMORY_GATE`` of the mix's
   GPU milli, a share prefers a placement after which the node's free memory is at
   least m times its idle GPU milli (key 2's m). Key 2 keeps that memory from CPU-only
   and whole-GPU work, but on such mixes shares spend it themselves: on gpushare80
   (seed 42) 6.05 of the 8.68 points of capacity lost to shares failed on nodes with
   GPU room and CPU but not the memory. Ranked under key 1 and above key 4. Its sign
   depends on the mix in ways no figure the policy computes showed (ten seeds with the
   key always on: gpushare60 +0.16, g-gpushare90 +0.27, but g-gpushare50 -0.34 and
   g-mix-share60-spec20 -0.33), so, as with key 1, a rehearsal decides it, drawn with
   each shape's mean memory (``rehearsal.py``). A mix with key 1 to rehearse (some
   model under pressure) goes without key 6: the second rehearsal would add about 2 s
   to the slowest such fill (g-mix-share60-spec20, 6.9-7.9 s with a rehearsal's two
   fills at once, 9.2-9.7 s before, on a slow machine), close to its 10 s. ``suanli_online`` goes without it until it has learned the mix from
   ``LEARNED_MIX_REQUESTS`` requests and rehearses then, once (issue 16, session 47,
   BENCHMARKS.md).

**Packing while the cluster is nearly empty, for mixes with restricted requests**
(FGD's ``pack_below`` and ``pack_if``; ``packs_while_nearly_empty``). With under
``PACK_BELOW`` of the cluster's GPU milli allocated, a mix with at least
``PACK_RESTRICTED`` of its requests restricted to GPU model lists, or at least
``PACK_RESTRICTED_MULTI`` of them while requests for two GPUs or more ask for
``PACK_MULTI`` of its GPU milli, is planned as no mix: FGD's score ties everywhere, the
keys see no mix, and work goes where the seeded node order puts it, packed onto the
first nodes. Why: on such mixes FGD planning on the first requests' mix spread the work
and cost the restricted requests their room later (planning on no mix for the first
1,024 requests lifted FGD's own online policy by 0.4 points on the 26 traces with
restricted requests). Ungated it cost 0.05 points on the 20 shipped traces (default
-0.09, cpu200 -0.19), all without restricted requests. The fifth was chosen on the
shipped gpuspec family (packing lost on gpuspec20, 0.18 restricted, and gained on
gpuspec25, 0.22); the second clause on six generated tune traces (``bench/gen_traces.py``'s
``TUNE_5``: packing gained where multi-GPU requests asked for 0.2 of the milli and lost or
did nothing at 0.07 and 0.10, or with 0.04 restricted) (issue 16, sessions 36-37,
BENCHMARKS.md). A learned mix is judged again as it grows, and while it is young its
multi-GPU share swings across ``PACK_MULTI`` (a few hundred requests hold a dozen
multi-GPU ones), so ``suanli_online``'s gate stays open once it has opened on a mix
learned from ``PACK_LATCH`` requests (FGD's ``pack_latch``; issue 16, session 38).

**Which keys apply depends on the mix the policy plans for** (``active_keys``; the
mix is the target, learned online for ``suanli_online``; never the trace's name):

* a CPU-bound mix (``cpu_demand_ratio`` > ``CPU_BOUND``) drops keys 2 and 3: CPU-only
  work takes the CPU next to idle GPUs anyway, and key 3 alone cost allocation on the
  CPU-bound traces (cpu300, g-cpu3);
* when node-sized requests (multi-GPU requests for every GPU of the largest nodes)
  ask for more than ``NODE_SIZED_FGD`` of the mix's GPU milli (``node_sized_share``),
  keys 1, 2 and 3 are dropped: whole free nodes are what such a mix needs, and each of
  keys 2 and 3 cost 0.04-0.07 points on g-multigpu50 (0.39), while all keys together
  still gained 0.04 on multigpu40 (0.27). Key 1 there (its 120-core 8-GPU requests
  make G3 scarce) cost 0.004 points.

Dropping key 2 for whole-GPU pods whenever the mix holds node-sized requests was
tried and rejected: +0.16 points on g-multigpu10, but -0.34 against FGD on gpuspec05
(+0.17 with the key, seeds 42-43; issue 16, BENCHMARKS.md).

Key 1 applies otherwise (it does nothing without restricted requests); key 4 applies
whenever the mix holds a node-sized request (it does nothing otherwise); key 5 applies
unless a GPU model is oversubscribed by restricted requests (it does nothing without
shares); key 6 applies where shares ask for ``SHARE_MEMORY_GATE`` of the GPU milli, no
model is under pressure and its rehearsal says it helps. The thresholds
were chosen on the tune side of ``bench/gen_traces.py``'s split (issue 16,
BENCHMARKS.md says which traces were looked at).

A CPU-surplus key (key 2) for sharing pods lost allocation in the experiments (it
pulls them off the packed nodes); key 3 only separates placements that leave the node
unusable. Keys 1-4 and 6 depend only on the node's own state and the target, so the
per-shape score cache applies to them; key 5 depends on what the policy placed before
(its pattern book) and is added over the cached scores.
The policy is deterministic for a seed.

Measured against FGD on every paper trace in BENCHMARKS.md ("Scheduler: fill quality").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from suanli.scheduler.model import MILLI_PER_GPU, Request
from suanli.scheduler.policies import patterns, rehearsal
from suanli.scheduler.policies.fgd import FGD, sigmoid_score
from suanli.scheduler.policies.fragmentation import TargetArrays, fits_after_share
from suanli.scheduler.policies.target import TargetWorkload
from suanli.scheduler.policy import request_shape
from suanli.scheduler.state import ClusterState

#: Room under FGD's integer score (0..100) for the tie-break keys.
_SPAN = 1 << 16
#: Room for the CPU level (0..2) under the model-pressure level.
_CPU_LEVELS = 4
#: Key 2 is off when the mix's CPU at full GPU allocation exceeds this share of the
#: cluster's CPU (``cpu_demand_ratio``). Chosen on the cpu family (issue 16's split):
#: key 2 gains on cpu235 (ratio 1.03) and loses on cpu300 (1.19).
CPU_BOUND = 1.1
#: Keys 2 and 3 are off when requests that need whole nodes ask for more than this
#: share of the mix's GPU milli (``node_sized_share``). Chosen on the multigpu family
#: (issue 16's second split): multigpu40 (0.27) gains with them, g-multigpu50 (0.39) loses.
NODE_SIZED_FGD = 1 / 3
#: The tie-break keys, by the number the module docstring gives them.
#: Key 2 is two keys here: "cpu" for CPU-only pods, "cpu_gpu" for whole-GPU pods.
KEYS = frozenset({"pressure", "cpu", "cpu_gpu", "usable", "whole", "patterns", "share_memory"})
#: Key 1 counts a request as restricted when the GPUs it can use are under this share
#: of the cluster's: T4-only (14 % of the Alibaba cluster's GPUs) and G3-sized (5 %)
#: requests count; a G2-only one (71 %) or a whole-GPU pod that any node with 8 GPUs
#: can hold does not.
RESTRICTED_ROOM = 0.5
#: Key 1 compares pressure in steps of this share of a model's GPUs. Chosen on the
#: shipped gpuspec family (issue 16, fourth pass): 0.1 separated T4 at 12 % on
#: gpuspec05 and lost 0.28 points there; 0.35 and 0.5 left T4 at 30 % on gpuspec10
#: unseparated and lost 0.54 there.
PRESSURE_STEP = 0.25
#: Key 6 is considered only where shares ask for at least this share of the mix's GPU
#: milli (``share_milli_share``), and kept only where a rehearsal says it helps. Chosen on
#: the shipped gpushare family (issue 16, session 46): ungated it lost 0.45 points on
#: gpushare40 (0.43 of the milli in shares) and gained 0.17 on gpushare60 (0.63).
SHARE_MEMORY_GATE = 0.5
#: ``suanli_online`` rehearses key 1 once it has learned the mix from this many requests,
#: and keeps the key before. Rehearsed at 1,024 the decision followed the sample rather
#: than the mix (on gpuspec10 it dropped a key worth 0.54 points) and lost allocation;
#: on a mix learned from 4,096 it was below ``fgd`` on 7 of 26 traces against 11 without
#: a rehearsal (issue 16, session 35, BENCHMARKS.md).
LEARNED_MIX_REQUESTS = 4096
#: Packing while nearly empty (module docstring): under this share of the GPU milli
#: allocated, for a mix with at least ``PACK_RESTRICTED`` of its requests restricted to
#: model lists, or ``PACK_RESTRICTED_MULTI`` of them with requests for two GPUs or more
#: asking for ``PACK_MULTI`` of its GPU milli.
PACK_BELOW = 0.1
PACK_RESTRICTED = 0.2
PACK_RESTRICTED_MULTI = 0.06
PACK_MULTI = 0.15
#: ``suanli_online`` keeps packing while nearly empty once its gate has opened on a mix
#: learned from this many requests: a mix of a few hundred requests holds a dozen
#: multi-GPU ones and swings across ``PACK_MULTI`` (module docstring).
PACK_LATCH = 128
#: ``suanli_online`` solves key 5's patterns (``patterns.py``) again for its learned mix
#: when the mix moved and at least this many shares were placed since the last solve.
PATTERNS_RESOLVE_SHARES = 256
#: Key 5 keeps a planned GPU from shares of other sizes only while shares ask for at most
#: this share of the mix's GPU milli (``share_milli_share``). Chosen on the shipped
#: gpushare family (issue 16, session 43): keeping gained 0.31 points over not keeping on
#: gpushare60 (0.6 of the milli in shares) and lost 0.07 on gpushare80 (0.8), where
#: nearly every GPU ends up holding shares and the kept ones wait while the rest fill.
KEEP_PLANNED_SHARES = 0.7
#: Key 5 is off when restricted requests alone want at least this share of some GPU
#: model's GPUs at full arrival (key 1's pressure). Chosen on the shipped gpuspec family
#: and four fresh draws (issue 16, session 44, ``bench/gen_traces.py``'s ``TUNE_6``):
#: against key 5 off (seeds 42-45), it gained 0.17 points on gpuspec20 (T4 at 0.69) and
#: was level on gpuspec25 (0.91); it lost 0.24-0.31 on every draw with T4 at 1.14-1.75.
OVERSUBSCRIBED = 1.0
#: how far above (a slot) or below (another plan's GPU) every other key key 5 ranks a node
_SLOT = 1 << 48
#: how far above FGD's score (under ``_SPAN`` * 100) key 1 ranks a node a request takes whole
_WHOLE_NODE = 1 << 24


def packs_while_nearly_empty(mix: TargetWorkload) -> bool:
    """Whether the policy plans on no mix while the cluster is nearly empty (module docstring)."""
    restricted = mix.restricted_share
    return restricted >= PACK_RESTRICTED or (restricted >= PACK_RESTRICTED_MULTI and mix.multi_gpu_share >= PACK_MULTI)


def model_pressure(state: ClusterState, t: TargetArrays) -> np.ndarray:
    """Per GPU model, key 1's pressure (module docstring): the share of its GPUs the mix's
    restricted GPU requests will want when the mix has asked for the cluster's whole
    GPU capacity, each request spread evenly over the GPUs it can use."""
    n_models = len(state.models)
    pressure = np.zeros(n_models)
    demand = t.weights * t.milli * t.gpus
    total = float(demand.sum())
    if total <= 0:
        return pressure
    node_gpus = (state.gpu_total > 0).sum(axis=1)
    node_milli = state.gpu_total.sum(axis=1).astype(np.float64)
    capacity = np.bincount(state.model_id, weights=node_milli, minlength=n_models)
    for k in np.flatnonzero(t.milli > 0):
        hosts = (node_gpus >= t.gpus[k]) & (state.cpu_total >= t.cpu[k]) & t.model_ok[k, state.model_id]
        room = float(node_milli[hosts].sum())
        if room <= 0 or room >= RESTRICTED_ROOM * state.total_gpu_milli:
            continue
        usable = np.bincount(state.model_id[hosts], weights=node_milli[hosts], minlength=n_models)
        wanted = demand[k] / total * state.total_gpu_milli  # milli, at full arrival
        pressure += wanted / room * np.divide(usable, capacity, out=np.zeros(n_models), where=capacity > 0)
    return pressure


def usable_after_share(state: ClusterState, req: Request, idx: np.ndarray, t: TargetArrays) -> np.ndarray:
    """(K, G) bool: after placing the sharing request ``req`` on GPU g of node idx[k],
    the node has no idle GPU milli left or can host at least one GPU task of ``t``
    (enough GPUs with enough free milli, enough CPU, an allowed model). Charging GPU g
    only changes that GPU's fit per task (``fits_after_share``)."""
    free = state.gpu_free[idx].astype(np.int64)
    milli = req.milli_per_gpu
    if t.weights.size == 0:
        return np.ones(free.shape, dtype=bool)
    drained = (free.sum(axis=1) == milli)[:, None]  # no idle milli left (wherever g fits)
    fits = fits_after_share(free, milli, t)
    cpu_ok = (state.cpu_free[idx] - req.cpu_milli)[:, None] >= t.cpu[None, :]  # (K, M)
    task_ok = cpu_ok & t.model_ok[:, state.model_id[idx]].T & (t.milli > 0)[None, :]
    return drained | ((fits >= t.gpus) & task_ok[:, None, :]).any(axis=2)


def hosts_node_sized(
    gpu_free: np.ndarray, cpu_free: np.ndarray, model: np.ndarray, t: TargetArrays, sized: np.ndarray
) -> np.ndarray:
    """(K,) bool: the node can host at least one of the node-sized tasks ``sized``
    (indices into ``t``): enough GPUs with enough free milli, enough CPU, an allowed model."""
    ok = np.zeros(gpu_free.shape[0], dtype=bool)
    for k in sized:
        fits = (gpu_free >= t.milli[k]).sum(axis=1) >= t.gpus[k]
        ok |= fits & (cpu_free >= t.cpu[k]) & t.model_ok[k, model]
    return ok


class SuanliPolicy(FGD):
    name = "suanli"

    def __init__(
        self,
        target: TargetWorkload | None,
        keys: frozenset[str] = KEYS,
        rehearse: bool = True,
        pack_below: float = PACK_BELOW,
        pack_if: Callable[[TargetWorkload], bool] | None = packs_while_nearly_empty,
        pack_latch: int | None = PACK_LATCH,
    ) -> None:
        super().__init__(target, pack_below, pack_if, pack_latch)
        if not keys <= KEYS:
            raise ValueError(f"unknown keys {sorted(keys - KEYS)}; choose from {sorted(KEYS)}")
        #: The keys in use (ablations in bench/ switch some off; the shipped policy uses all).
        self.keys = keys
        #: Whether key 1 is kept only when a rehearsal of the mix says it helps
        #: (``rehearsal.py``; a learned mix from ``LEARNED_MIX_REQUESTS`` requests on).
        #: The rehearsals' own policies do not rehearse.
        self.rehearse = rehearse
        self._kept: dict[str, bool] = {}  #: the rehearsals' verdicts, by key, once given
        self._model_keys_of: TargetArrays | None = None
        self._ratio = np.zeros((2, 0))
        self._pressure_level = np.zeros(0, np.int64)
        self._active = keys
        self._sized = np.zeros(0, np.int64)
        self._book: patterns.PatternBook | None = None
        self._book_of: TargetWorkload | None = None
        self._book_solved_at = 0
        self._keeps_planned = True  #: key 5 keeps planned GPUs for their sizes (``KEEP_PLANNED_SHARES``)
        #: the request ``scores`` found slots for, and per node the slot's GPU and the
        #: node's version then (``pick_gpus`` takes a slot only from an unchanged node)
        self._slots: tuple[Request, dict[int, tuple[int, int]]] | None = None

    def observe(self, req: Request) -> None:
        super().observe(req)
        if self.rehearse and self.online is not None and self.online.seen == LEARNED_MIX_REQUESTS:
            self._model_keys_of = None  # the mix is learned: decide keys 1 and 6 by rehearsals now
            self.cache.clear()

    def scores(self, state: ClusterState, req: Request, feasible: np.ndarray) -> np.ndarray:
        """Key 5 (module docstring) over the cached per-node scores: a node with a slot of
        the share's size ranks above every other, and its slot is the GPU taken; a node
        whose pick (FGD's GPU) is another plan's GPU ranks below every other."""
        base = super().scores(state, req, feasible)
        self._slots = None
        if not req.is_sharing or "patterns" not in self.active_keys(state):
            return base
        book = self.pattern_book()
        best = book.best_slots(state, req.milli_per_gpu)
        if best:
            self._slots = (req, {n: (gpu, int(state.version[n])) for n, gpu in best.items()})
        marked = np.zeros(state.num_nodes, bool)
        marked[list(best)] = True
        slot = marked[feasible]
        if not self._keeps_planned:
            return base + _SLOT * slot
        planned_nodes, planned_gpus = book.planned(state)
        known = planned_nodes >= 0
        planned_nodes, planned_gpus = planned_nodes[known], planned_gpus[known]
        picks = self.cache.entries[request_shape(req)].extra  # fresh for the feasible nodes
        held = state.gpu_free[planned_nodes, planned_gpus] < MILLI_PER_GPU  # a freed GPU's plan is stale
        marked[:] = False
        marked[planned_nodes[held & (picks[planned_nodes] == planned_gpus)]] = True
        return base + _SLOT * slot - _SLOT * (marked[feasible] & ~slot)

    def pick_gpus(self, state: ClusterState, req: Request, node: int) -> tuple[int, ...]:
        """A share's GPU: its slot on ``node`` (key 5), else FGD's pick; the choice goes in
        the pattern book (a placement then not made leaves a plan it drops later)."""
        if not req.is_sharing or "patterns" not in self.active_keys(state):
            return super().pick_gpus(state, req, node)
        slot = self._slots[1].get(node) if self._slots is not None and self._slots[0] is req else None
        self._slots = None  # a slot serves the pick after its scoring, once
        if slot is not None and slot[1] == state.version[node]:
            gpu = slot[0]
        else:
            (gpu,) = super().pick_gpus(state, req, node)
        self.pattern_book().placed(state, node, gpu, req.milli_per_gpu)
        return (gpu,)

    def pattern_book(self) -> patterns.PatternBook:
        """Key 5's book, planned on the mix the policy has now (``suanli_online``: solved
        again once ``PATTERNS_RESOLVE_SHARES`` shares after its mix moved)."""
        book = self._book
        if book is None:
            book = self._book = patterns.PatternBook(patterns.solve(patterns.share_sizes(self.target)))
            self._book_of = self.target
        elif self._book_of is not self.target and book.shares - self._book_solved_at >= PATTERNS_RESOLVE_SHARES:
            book.follow(patterns.solve(patterns.share_sizes(self.target)))
            self._book_of, self._book_solved_at = self.target, book.shares
        return book

    def cpu_demand_ratio(self, state: ClusterState) -> float:
        """CPU the mix asks for when the cluster's GPUs are fully allocated, over the
        cluster's CPU: the mix's CPU per GPU milli (CPU-only shapes included) times
        the GPU capacity, divided by the CPU capacity."""
        t = self.arrays(state)
        gpu = float((t.weights * t.milli * t.gpus).sum())
        cpu_total = float(state.cpu_total.sum())
        if gpu <= 0 or cpu_total <= 0:
            return 0.0
        return float((t.weights * t.cpu).sum()) / gpu * state.total_gpu_milli / cpu_total

    def share_milli_share(self, state: ClusterState) -> float:
        """The share of the mix's GPU milli asked for by shares (one GPU, under a whole one)."""
        t = self.arrays(state)
        demand = t.weights * t.milli * t.gpus
        total = float(demand.sum())
        shares = (t.gpus == 1) & (t.milli > 0) & (t.milli < MILLI_PER_GPU)
        return float(demand[shares].sum()) / total if total > 0 else 0.0

    def node_sized_share(self, state: ClusterState) -> float:
        """The share of the mix's GPU milli asked for by multi-GPU requests that need
        every GPU of the cluster's largest nodes (8-GPU pods on the Alibaba cluster)."""
        t = self.arrays(state)
        demand = t.weights * t.milli * t.gpus
        total = float(demand.sum())
        if total <= 0:
            return 0.0
        return float(demand[t.gpus >= max(2, state.gpu_total.shape[1])].sum()) / total

    def active_keys(self, state: ClusterState) -> frozenset[str]:
        """The keys in use for the mix the policy has now (see the module docstring):
        a CPU-bound mix, or one where node-sized requests ask for over
        ``NODE_SIZED_FGD`` of the GPU milli, drops keys 2 and 3."""
        self.model_keys(state)
        return self._active

    def model_keys(self, state: ClusterState) -> tuple[np.ndarray, np.ndarray]:
        """Per GPU model: CPU milli and memory MiB per GPU milli of the mix's GPU
        requests allowed on it (2, models), and the pressure level (higher = less
        demanded by restricted requests)."""
        t = self.arrays(state)
        if self._model_keys_of is not t:
            gpu_task = t.milli > 0
            allowed = t.model_ok & gpu_task[:, None]  # (M, models)
            demand = t.weights * t.milli * t.gpus
            asked = np.stack([t.weights * t.cpu, t.weights * t.memory]) @ allowed
            gpu = demand @ allowed
            ratio = np.where(gpu > 0, asked / np.where(gpu > 0, gpu, 1.0), 0.0)
            pressure = model_pressure(state, t)
            steps = np.floor(pressure / PRESSURE_STEP + 1e-9).astype(np.int64)
            active = set(self.keys)
            if pressure.max(initial=0.0) >= OVERSUBSCRIBED:
                active.discard("patterns")
            node_sized = self.node_sized_share(state)
            if self.cpu_demand_ratio(state) > CPU_BOUND:
                active -= {"cpu", "cpu_gpu", "usable"}
            if node_sized > NODE_SIZED_FGD:
                active -= {"pressure", "cpu", "cpu_gpu", "usable"}
            if "pressure" in active and steps.max() > 0 and self.rehearse and not self._helps(state, "pressure"):
                active.discard("pressure")
            shares = self.share_milli_share(state)
            if shares < SHARE_MEMORY_GATE or steps.max() > 0:
                active.discard("share_memory")  # a mix with key 1 to rehearse has no time for key 6's
            elif "share_memory" in active and self.rehearse and not self._helps(state, "share_memory"):
                active.discard("share_memory")
            level = steps.max() - steps if "pressure" in active else np.zeros_like(steps)
            self._model_keys_of, self._ratio, self._pressure_level = t, ratio, level
            self._keeps_planned = shares <= KEEP_PLANNED_SHARES
            self._sized = np.flatnonzero((t.gpus >= max(2, state.gpu_total.shape[1])) & (t.milli > 0))
            if self._sized.size == 0:
                active.discard("whole")
            self._active = frozenset(active)
        return self._ratio, self._pressure_level

    def _helps(self, state: ClusterState, key: str) -> bool:
        """Whether ``key`` (1: "pressure", 6: "share_memory") allocates more than the same
        policy without it in a rehearsal of the mix on an empty copy of the cluster
        (``rehearsal.py``; key 6's draws ask for memory, the key keeps it). Rehearsed once.
        A learned mix keeps key 1 and goes without key 6 until it counts
        ``LEARNED_MIX_REQUESTS`` requests."""
        if self.online is not None and self.online.seen < LEARNED_MIX_REQUESTS:
            return key == "pressure"
        if key not in self._kept:
            keys = self.keys

            def make(with_key: bool) -> SuanliPolicy:
                return SuanliPolicy(self.target, keys if with_key else keys - {key}, False, self.pack_below, self.pack_if)

            self._kept[key] = rehearsal.better(state.nodes, self.target, make, with_memory=key == "share_memory")
        return self._kept[key]

    def _score(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.model_keys(state)
        if not req.is_sharing or "usable" not in self._active:
            return super()._score(state, req, idx)
        # Per GPU: FGD's score, then key 3 (2 * score + usable); the node takes its best GPU.
        delta, fit = self.fragmentation_change(state, req, idx)
        usable = usable_after_share(state, req, idx, self.arrays(state))
        scores = np.where(fit, 2 * sigmoid_score(delta) + usable, -1)
        return scores.max(axis=1), scores.argmax(axis=1)

    def node_scores(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        primary, gpu = self._node_scores(state, req, idx)
        if req.is_sharing and "whole" in self._active:
            # Key 4 (module docstring), the last key: the lowest level of the secondary,
            # which holds key 1 (pressure level * _CPU_LEVELS) for a sharing request.
            primary = primary + self._keeps_node_sized(state, req, idx, gpu)
        return primary, gpu

    def _keeps_node_sized(self, state: ClusterState, req: Request, idx: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        """(K,) int, key 4: 1 unless placing the sharing request ``req`` on GPU gpu[k]
        of node idx[k] takes away the node's room for the mix's node-sized tasks (it
        could host one before and can host none after)."""
        t = self.arrays(state)
        free = state.gpu_free[idx]
        cpu, model = state.cpu_free[idx], state.model_id[idx]
        before = hosts_node_sized(free, cpu, model, t, self._sized)
        after = free.copy()
        after[np.arange(idx.size), gpu] -= req.milli_per_gpu
        kept = hosts_node_sized(after, cpu - req.cpu_milli, model, t, self._sized)
        return (~before | kept).astype(np.int64)

    def _node_scores(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        primary, gpu = super().node_scores(state, req, idx)
        ratio, pressure_level = self.model_keys(state)
        model = state.model_id[idx]
        idle = state.gpu_free[idx].sum(axis=1).astype(np.int64)

        def memory_kept(idle: np.ndarray) -> np.ndarray:  # keys 2 and 6: memory left for ``idle`` GPU milli
            return state.mem_free[idx] - req.memory_mib >= ratio[1, model] * idle

        def surplus(idle: np.ndarray) -> np.ndarray:  # key 2: CPU and memory left for ``idle`` GPU milli
            return (state.cpu_free[idx] - req.cpu_milli >= ratio[0, model] * idle) & memory_kept(idle)

        if not req.milli_per_gpu:
            if "cpu" not in self._active:
                # Key 2 off (a CPU-bound or mostly node-sized mix, see active_keys):
                # FGD's score alone, ties to the node order.
                return primary * _SPAN, gpu
            cpu_level = np.where(idle == 0, 2, surplus(idle).astype(np.int64))
            return primary * _SPAN + cpu_level, gpu
        secondary = pressure_level[model] * _CPU_LEVELS
        if not req.is_sharing and "cpu_gpu" in self._active:
            secondary = secondary + surplus(idle - req.total_gpu_milli).astype(np.int64)
        if req.is_sharing and "share_memory" in self._active:  # key 6, above key 4
            secondary = secondary + 2 * memory_kept(idle - req.milli_per_gpu).astype(np.int64)
        score = primary * _SPAN + secondary
        if not req.is_sharing:  # key 1 above FGD's score where the request takes every GPU of the node
            whole = state.gpu_count[idx] == req.gpu_count
            score = score + np.where(whole, pressure_level[model], 0) * _WHOLE_NODE
        return score, gpu
