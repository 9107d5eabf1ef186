"""The contract every registered policy (conf/policy/*.yaml) must satisfy.

Like cachetools' shared cache tests: one mixin-style check runs against every policy found in
the config group, so a new policy is covered the moment its yaml exists.
"""

from __future__ import annotations

import inspect

import pytest
from hydra.utils import instantiate
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.lru import LRU
from omegaconf import OmegaConf

from memlens.checker import CHECKS, CheckFailed, check_policy
from memlens.config.store import CONF_DIR, registered_policies
from memlens.policy import OrderedPolicy, Policy, PolicyError
from memlens.simulator import MOVE_NAMES, simulate
from memlens.testing import pin, rq, trace, traces, unpin, w
from memlens.trace.io import trace_from_events
from memlens.trace.model import ITEM_TYPES

POLICIES = registered_policies()


def policy_config(name: str):
    """The policy's yaml as a constructor call (the lead's schema ``defaults`` dropped)."""
    node = OmegaConf.load(CONF_DIR / "policy" / f"{name}.yaml")
    node.pop("defaults", None)
    return node


def make_policy(cfg) -> Policy:
    return instantiate(cfg, _convert_="all")


def test_window_and_lru_are_registered():
    assert {"window", "lru"} <= set(POLICIES)


@pytest.mark.parametrize("name", POLICIES)
def test_policy_passes_the_checker(name):
    cfg = policy_config(name)
    policy = make_policy(cfg)
    assert isinstance(policy, Policy)
    assert isinstance(policy.name, str) and policy.name
    check_policy(lambda: make_policy(cfg))


class EvictsPinned(OrderedPolicy):
    """A deliberately broken policy: ignores pins."""

    name = "broken"

    def victims(self, excess, now):
        return [self._order.popitem(last=False)[0]] if self._order else []


class NeverEvicts(OrderedPolicy):
    name = "hoarder"

    def victims(self, excess, now):
        return []


class LeakyLFU(OrderedPolicy):
    """Broken: use counts live on the instance and survive reset(), so trace B is replayed
    with trace A's counts (item indices of different traces collide)."""

    name = "leaky-lfu"

    def __init__(self):
        self.uses: dict[int, int] = {}

    def touch(self, item, now):
        self.uses[item] = self.uses.get(item, 0) + 1

    def victims(self, excess, now):
        candidates = [i for i in self._order if i not in self._pinned]
        if not candidates:
            return []
        victim = min(candidates, key=lambda i: (self.uses.get(i, 0), i))
        del self._order[victim]
        return [victim]


def test_checker_catches_a_policy_that_evicts_pinned_items():
    with pytest.raises(CheckFailed, match="check_decisions_accepted.*pinned.*Fix: "):
        check_policy(EvictsPinned)


def test_checker_catches_a_policy_that_never_evicts():
    with pytest.raises(CheckFailed, match="check_decisions_accepted.*chose nothing"):
        check_policy(NeverEvicts)


def test_checker_catches_state_leaking_across_reset():
    with pytest.raises(CheckFailed, match="check_reset_forgets.*reset"):
        check_policy(LeakyLFU)


def test_simulator_rejects_victims_that_are_not_resident():
    class Phantom(OrderedPolicy):
        name = "phantom"

        def victims(self, excess, now):
            return [10_000]

    tr = trace_from_events(
        [{"event": "write", "id": k, "tokens": 5, "type": "user_input"} for k in "abc"]
    )
    with pytest.raises(PolicyError, match="not resident"):
        simulate(tr, Phantom(), budget=8)


# ------------------------------------------------------------- admit decides only
class SelectiveLRU(LRU):
    """Admits user inputs only.  Its admit decides and never inserts: the simulator does."""

    name = "selective-lru"

    def admit(self, item, now, reason):
        return ITEM_TYPES[self.ctx.trace.item_type[item]] == "user_input"


def test_a_policy_overriding_admit_need_not_insert():
    # before the change, the default admit inserted: an override returning True left a, c
    # and d out of the LRU order, and w d ended in "victims() chose nothing"
    tr = trace(w("a", 4, "user_input"), w("b", 4), w("c", 4, "user_input"),
               w("d", 4, "user_input"), rq("r", "a", "b", "c", "d"))  # fmt: skip
    res = simulate(tr, SelectiveLRU(), budget=8, engine="reference")
    moves = [(tr.item_id[i], MOVE_NAMES[k]) for i, k in zip(res.move_item, res.move_kind)]
    assert moves == [("a", "admit"), ("b", "bypass"), ("c", "admit"), ("d", "admit"),
                     ("a", "evict")]  # fmt: skip
    assert res.need_hit.tolist() == [0, 0, 1, 1]
    check_policy(SelectiveLRU)


class InsertsInAdmit(LRU):
    """Broken (the old contract): records the item in admit, so a declined item lingers."""

    name = "inserts-in-admit"

    def admit(self, item, now, reason):
        self.insert(item, now)
        return True


def test_checker_catches_a_policy_that_inserts_in_admit():
    with pytest.raises(CheckFailed, match="check_admit_only_decides.*not resident.*Fix: admit"):
        check_policy(InsertsInAdmit)


# ------------------------------------------------------------ the memory view
class Spy(LRU):
    """Records what ``ctx.memory`` shows at each call."""

    name = "spy"

    def reset(self, ctx):
        super().reset(ctx)
        self.seen = []

    def _look(self, what, item):
        m = self.ctx.memory
        ids = self.ctx.trace.item_id
        self.seen.append((what, ids[item], m.used_tokens, m.pinned_tokens,
                          [ids[i] for i in m.items()], m.resident(item), m.is_pinned(item)))  # fmt: skip

    def insert(self, item, now):
        super().insert(item, now)
        self._look("insert", item)

    def victims(self, excess, now):
        out = super().victims(excess, now)
        self._look("victims", out[0])
        return out

    def pin(self, item):
        self._look("pin", item)

    def unpin(self, item):
        self._look("unpin", item)


def test_policy_context_shows_working_memory_read_only():
    tr = trace(w("x", 9, stream="other"), w("a", 4), w("b", 5), pin("a"), w("c", 3),
               unpin("a"))  # fmt: skip
    spy = Spy()
    simulate(tr, spy, budget=10)
    # (call, item, used, pinned tokens, resident items, item resident?, item pinned?)
    assert spy.seen == [
        ("insert", "a", 4, 0, ["a"], True, False),  # the entering item is already counted
        ("insert", "b", 9, 0, ["a", "b"], True, False),
        ("pin", "a", 9, 4, ["a", "b"], True, True),  # the pin is already recorded
        ("insert", "c", 12, 4, ["a", "b", "c"], True, False),
        ("victims", "b", 12, 4, ["a", "b", "c"], True, False),  # victims are still resident
        ("unpin", "a", 7, 0, ["a", "c"], True, False),
    ]
    memory = spy.ctx.memory
    assert list(memory) == [tr.item_index["a"], tr.item_index["c"]] and len(memory) == 2
    assert tr.item_index["x"] not in memory  # another stream's item: never in this view
    with pytest.raises(TypeError):
        memory.pinned[0] = None  # type: ignore[index]
    with pytest.raises(AttributeError):
        memory.used_tokens = 0  # type: ignore[misc]


def test_policies_keep_no_shadow_of_the_simulators_state():
    # MemGPT kept its own resident and pinned token counts, the oracle its own resident set,
    # most policies their own pin sets: now they all read ctx.memory
    tr = trace(w("a", 4), pin("a"), w("b", 8), rq("r", "a", "b"))
    for name in POLICIES:
        policy = make_policy(policy_config(name))
        simulate(tr, policy, budget=10, engine="reference")
        state = vars(policy)
        assert not {"_used", "_pinned_tok", "_resident"} & set(state), name
        assert state.get("_pinned", policy.ctx.memory.pinned) is policy.ctx.memory.pinned, name


# ------------------------------------------------------------- the named checks
def test_every_check_says_what_it_checks():
    assert len(CHECKS) >= 8
    for check in CHECKS:
        assert check.__name__.startswith("check_") and len(check.__doc__ or "") > 40


class Overflowing(LRU):
    """Broken: keeps a summary bigger than the budget whatever the pins leave."""

    name = "overflowing"
    extra_tokens = 30


class Moody(LRU):
    """Broken: evicts at random from the global generator, not ctx.rng."""

    name = "moody"

    def victims(self, excess, now):
        import random

        free = [i for i in self._order if i not in self._pinned]
        if not free:
            return []
        item = random.choice(free)
        del self._order[item]
        return [item]


@pytest.mark.parametrize("policy, check, seen", [
    (Overflowing, "check_budget_respected", "tokens in working memory at request"),
    (Moody, "check_same_seed_same_result", "two runs with the same seed differ"),
])  # fmt: skip
def test_a_failed_check_names_itself_what_it_saw_and_the_fix(policy, check, seen):
    with pytest.raises(CheckFailed, match=f"^{check} failed for {policy.name} on <random-0> "
                       f"at budget=.*: .*{seen}.*  Fix: "):  # fmt: skip
        check_policy(policy)


# ------------------------------------------------------- constructor signatures
SCALARS = ("int", "float", "bool", "str")
ALLOWED = {*SCALARS, *(f"{t} | None" for t in SCALARS), "dict[str, float] | None",
           "list[str] | None"}  # fmt: skip
PROGRAMMATIC = {("Oracle", "plans"): "list | None"}  # skipped by the typed config schemas


@pytest.mark.parametrize("name", POLICIES)
def test_constructor_parameters_are_typed_for_config_schemas(name):
    # the oracle took **settings (untyped, unchecked); every parameter now has one of the
    # types a config schema can be derived from
    cls = type(make_policy(policy_config(name)))
    for p in inspect.signature(cls).parameters.values():
        assert p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL), (name, p.name)
        allowed = PROGRAMMATIC.get((cls.__name__, p.name))
        assert p.annotation == allowed or p.annotation in ALLOWED, (name, p.name, p.annotation)
        assert p.default is not p.empty, (name, p.name)


class Auditor(LRU):
    """Checks at every call that ctx.memory's counts add up over the items it lists."""

    name = "auditor"

    def _audit(self):
        m, tok = self.ctx.memory, self.ctx.trace.item_tokens
        items = m.items()
        assert m.used_tokens == sum(int(tok[i]) for i in items)
        assert m.pinned_tokens == sum(int(tok[i]) for i in m.pinned)
        assert set(m.pinned) <= set(items) and all(m.resident(i) for i in items)
        self.audits += 1

    def reset(self, ctx):
        super().reset(ctx)
        self.audits = 0

    def insert(self, item, now):
        super().insert(item, now)
        self._audit()

    def observe(self, request, now):
        self._audit()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(events=traces(), budget=st.sampled_from([1, 40, 100, 250]), demand_fetch=st.booleans())
def test_memory_view_adds_up_on_any_trace(events, budget, demand_fetch):
    simulate(trace(*events), Auditor(), budget, demand_fetch=demand_fetch)
