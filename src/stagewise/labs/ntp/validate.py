"""Validation of NTP samples: collocation, consistency, query partial orders, Assumption 3.

Works on index-form samples ``(input, next)`` with ``input`` a tuple of token indices
(query last). Every check returns one-line messages naming the offending samples, so the
caller can collect all violations and raise a single :class:`~stagewise.errors.UserError`.
:class:`IncrementalChecker` applies the same rules one batch of samples at a time (used by
the generator's prefix-closed mode); the full checks remain the reference.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from stagewise.labs.ntp.dataset import QueryStructure

Pair = tuple[tuple[int, ...], int]  # (input token indices, next token index)
Relations = dict[int, dict[tuple[int, int], list[Pair]]]  # q -> (greater, lesser) -> samples


def render_sample(tokens: Sequence[str], sample: Pair) -> str:
    """``"S V O" -> P``."""
    inp, nxt = sample
    return '"' + " ".join(tokens[i] for i in inp) + '" -> ' + tokens[nxt]


def render_samples(tokens: Sequence[str], samples: Sequence[Pair], limit: int = 3) -> str:
    """Comma-separated rendering of at most ``limit`` distinct samples, then ``and k more``."""
    distinct = sorted(set(samples), key=lambda s: (len(s[0]), s))
    text = ", ".join(render_sample(tokens, s) for s in distinct[:limit])
    return text + (f" and {len(distinct) - limit} more" if len(distinct) > limit else "")


def next_conflicts(tokens: Sequence[str], samples: Sequence[Pair]) -> list[str]:
    """One message per input that appears with two or more different next tokens."""
    nexts: dict[tuple[int, ...], set[int]] = defaultdict(set)
    for inp, nxt in samples:
        nexts[inp].add(nxt)
    errors = []
    for inp, ys in sorted(nexts.items(), key=lambda kv: (len(kv[0]), kv[0])):
        if len(ys) > 1:
            shown = render_samples(tokens, [(inp, y) for y in ys])
            errors.append(
                f"inconsistent next token: the same input has {len(ys)} different next "
                f"tokens ({shown}); each input must have one next token"
            )
    return errors


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def _quote_all(tokens: Sequence[str], ids: Sequence[int]) -> str:
    names = [f"'{tokens[i]}'" for i in ids]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def resolve_collocation(
    tokens: Sequence[str], samples: Sequence[Pair], given: Mapping[int, int], allow_non_injective: bool = False
) -> tuple[list[int] | None, list[str], list[str]]:
    """The collocation ``n`` as a list (``n[x]``) or None, error messages, and the
    non-injectivity messages that ``allow_non_injective`` turned into warnings.

    Sources, in order: length-1 samples ``([x], y)``, the ``given`` map, then inference:
    ``n^{-1}(y)`` lies in every sentence with next token ``y``; candidates already assigned
    are removed and a unique candidate is assigned, until nothing changes. A last unassigned
    token is matched with the last free target when that is consistent with the samples.
    """
    vocab = len(tokens)
    assigned: dict[int, int] = {}
    sources: dict[int, str] = {}
    errors: list[str] = []
    for inp, nxt in sorted(s for s in samples if len(s[0]) == 1):
        if inp[0] not in assigned:  # a second next for [x] is reported by next_conflicts
            assigned[inp[0]] = nxt
            sources[inp[0]] = "sample " + render_sample(tokens, (inp, nxt))
    for x, y in sorted(given.items()):
        entry = f"collocation entry '{tokens[x]}': '{tokens[y]}'"
        if x in assigned and assigned[x] != y:
            errors.append(f"{entry} contradicts {sources[x]}; remove one of them")
        elif x not in assigned:
            assigned[x], sources[x] = y, entry
    preimages: dict[int, list[int]] = defaultdict(list)
    for x, y in assigned.items():
        preimages[y].append(x)
    non_injective = []
    for y, xs in sorted(preimages.items()):
        if len(xs) > 1:
            xs = sorted(xs)
            verb = "both map" if len(xs) == 2 else "all map"
            non_injective.append(
                f"non-injective collocation: tokens {_quote_all(tokens, xs)} {verb} to "
                f"'{tokens[y]}' (from {', '.join(sources[x] for x in xs)}); "
                "the collocation must be a permutation of the tokens"
            )
    warnings = non_injective if allow_non_injective else []
    errors += [] if allow_non_injective else non_injective
    if errors:
        return None, errors, warnings

    contains: dict[int, set[int]] = {}  # y -> tokens present in every sentence with next y
    for inp, nxt in samples:
        if len(inp) >= 2:
            contains[nxt] = contains[nxt] & set(inp) if nxt in contains else set(inp)
    targets = set(assigned.values())
    changed = True
    while changed:
        changed = False
        for y in sorted(contains):
            if y in targets:
                continue
            candidates = contains[y] - assigned.keys()
            if len(candidates) == 1:
                (x,) = candidates
                assigned[x] = y
                targets.add(y)
                changed = True
    free_x = [x for x in range(vocab) if x not in assigned]
    free_y = [y for y in range(vocab) if y not in targets]
    if len(free_x) == 1 and len(free_y) == 1 and free_x[0] in contains.get(free_y[0], free_x):
        assigned[free_x[0]] = free_y[0]
        free_x, free_y = [], []
    for y in free_y:
        if y in contains and not contains[y] - assigned.keys():
            shown = render_samples(tokens, [s for s in samples if s[1] == y and len(s[0]) >= 2])
            errors.append(
                f"no token can collocate with '{tokens[y]}': the sentences with next token "
                f"'{tokens[y]}' ({shown}) share no token whose collocation is still free"
            )
    for x in free_x:
        errors.append(
            f"collocation of token '{tokens[x]}' cannot be inferred from the samples; "
            f"add a sample {{input: [{tokens[x]}], next: ...}}"
        )
    if errors:
        return None, errors, warnings
    return [assigned[x] for x in range(vocab)], [], warnings


def sentence_checks(
    tokens: Sequence[str], samples: Sequence[Pair], collocation: Sequence[int]
) -> tuple[list[int], Relations, list[str], list[str]]:
    """Optimal token per sample, the relations ``x* >_q x'`` with their samples, errors, and
    Assumption 3 breaches (separate, so that an out-of-assumption run can allow them).

    The optimal tokens of a sample are those x of its input with ``n(x) == next`` (one token
    for an injective ``n``; with a non-injective ``n`` several, each above every other token
    and none above another). The one returned is the most frequent (then the smallest);
    -1 where none exists (an error: a sentence of length >= 2 holding no such token).
    """
    preimage: dict[int, int] = {}
    for x, y in enumerate(collocation):
        preimage.setdefault(y, x)
    optimal: list[int] = []
    relations: Relations = defaultdict(lambda: defaultdict(list))
    errors: list[str] = []
    breaches: list[str] = []
    for sample in samples:
        inp, nxt = sample
        if len(inp) == 1:
            optimal.append(inp[0])
            continue
        counts = Counter(inp)
        best_set = [x for x in counts if collocation[x] == nxt]
        if not best_set:
            that = f" (that is '{tokens[preimage[nxt]]}')" if nxt in preimage else ""
            errors.append(
                f"inconsistent next token in sample {render_sample(tokens, sample)}: no token "
                f"of the input has collocation '{tokens[nxt]}'{that}"
            )
            optimal.append(-1)
            continue
        best = max(best_set, key=lambda x: (counts[x], -x))
        optimal.append(best)
        worst, worst_count = max(
            ((x, c) for x, c in counts.items() if collocation[x] != nxt), key=lambda xc: (xc[1], -xc[0]),
            default=(best, 0),
        )
        if worst_count > counts[best]:
            breaches.append(
                f"Assumption 3 fails in sample {render_sample(tokens, sample)}: optimal token "
                f"'{tokens[best]}' appears {_times(counts[best])} but non-optimal token "
                f"'{tokens[worst]}' appears {_times(worst_count)}"
            )
        for top in best_set:
            for other in counts:
                if collocation[other] != nxt:
                    relations[inp[-1]][(top, other)].append(sample)
    return optimal, relations, errors, breaches


def _cyclic_components(nodes: set[int], succ: Mapping[int, set[int]]) -> list[list[int]]:
    """Strongly connected components with >= 2 nodes (iterative Tarjan), each sorted."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    out: list[list[int]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _shortest_cycle(start: int, members: set[int], succ: Mapping[int, set[int]]) -> list[int]:
    """Shortest directed cycle through ``start`` inside one component: [start, ..., start]."""
    parent: dict[int, int] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(succ.get(node, ())):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if child in members and child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    return [start, start]  # unreachable for a strongly connected component


def _first_edges(edges: Mapping[tuple[int, int], object]) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]]]:
    """Per token x, the smallest edge (x, b) and the smallest edge (a, x), in one pass (the
    confused-token messages name them; a scan per token was quadratic in the edges)."""
    over: dict[int, tuple[int, int]] = {}
    under: dict[int, tuple[int, int]] = {}
    for edge in edges:
        a, b = edge
        if a not in over or edge < over[a]:
            over[a] = edge
        if b not in under or edge < under[b]:
            under[b] = edge
    return over, under


def order_checks(
    tokens: Sequence[str], relations: Relations
) -> tuple[dict[int, QueryStructure], list[str], list[str]]:
    """Per-query structures, cycle messages and confused-token messages (tokens on a cycle
    are reported by their cycle only)."""
    vocab = frozenset(range(len(tokens)))
    structure: dict[int, QueryStructure] = {}
    cycles: list[str] = []
    confused: list[str] = []
    for q in sorted(relations):
        edges = relations[q]
        succ: dict[int, set[int]] = defaultdict(set)
        for a, b in edges:
            succ[a].add(b)
        greater = {a for a, _ in edges}
        lesser = {b for _, b in edges}
        in_cycle: set[int] = set()
        for component in _cyclic_components(greater | lesser, succ):
            in_cycle.update(component)
            members = set(component)
            pairs = [(a, b) for a in component for b in succ[a] if a < b and a in succ.get(b, ())]
            loops = [[a, b, a] for a, b in pairs] or [_shortest_cycle(component[0], members, succ)]
            for loop in loops:
                path = " > ".join(tokens[x] for x in loop)
                used = [s for a, b in zip(loop, loop[1:]) for s in edges[(a, b)]]
                cycles.append(
                    f"cycle under query '{tokens[q]}': {path} "
                    f"(samples {render_samples(tokens, used, limit=4)})"
                )
        first_over, first_under = _first_edges(edges)
        for x in sorted((greater & lesser) - in_cycle):
            over, under = first_over[x], first_under[x]  # x > b, a > x
            confused.append(
                f"token '{tokens[x]}' is confused under query '{tokens[q]}' "
                f"(above '{tokens[over[1]]}' in {render_samples(tokens, edges[over], 1)}, "
                f"below '{tokens[under[0]]}' in {render_samples(tokens, edges[under], 1)})"
            )
        optimal = frozenset(greater - lesser)
        non_optimal = frozenset(lesser - greater)
        structure[q] = QueryStructure(
            query=q,
            relations=frozenset(edges),
            optimal=optimal,
            non_optimal=non_optimal,
            non_comparable=vocab - optimal - non_optimal,
        )
    return structure, cycles, confused


class IncrementalChecker:
    """Accepts batches of samples only while the accumulated set stays valid.

    Holds a fixed collocation ``n``. A batch is rejected (state unchanged) when any sample
    would give an input two next tokens, lack its collocated token, breach Assumption 3, or
    make a token both greater and lesser under a query (no confused token also rules out
    every cycle, since each token on a cycle has something above and below it).
    """

    def __init__(self, collocation: Sequence[int]):
        self._inverse = {y: x for x, y in enumerate(collocation)}
        self._next: dict[tuple[int, ...], int] = {}
        self._greater: dict[int, set[int]] = defaultdict(set)
        self._lesser: dict[int, set[int]] = defaultdict(set)

    def try_add(self, batch: Sequence[Pair]) -> bool:
        """Add every sample of ``batch`` and return True, or add none and return False."""
        new_next: dict[tuple[int, ...], int] = {}
        new_greater: dict[int, set[int]] = defaultdict(set)
        new_lesser: dict[int, set[int]] = defaultdict(set)
        for inp, nxt in batch:
            if self._next.get(inp, nxt) != nxt or new_next.get(inp, nxt) != nxt:
                return False
            new_next[inp] = nxt
            if len(inp) == 1:
                if self._inverse[nxt] != inp[0]:
                    return False
                continue
            best, q = self._inverse[nxt], inp[-1]
            counts = Counter(inp)
            if counts[best] == 0 or any(c > counts[best] for c in counts.values()):
                return False
            others = set(counts) - {best}
            if not others:  # a sentence of one repeated token relates nothing
                continue
            if best in self._lesser[q] or best in new_lesser[q]:
                return False
            if others & (self._greater[q] | new_greater[q]):
                return False
            new_greater[q].add(best)
            new_lesser[q].update(others)
        self._next.update(new_next)
        for q, xs in new_greater.items():
            self._greater[q].update(xs)
        for q, xs in new_lesser.items():
            self._lesser[q].update(xs)
        return True
