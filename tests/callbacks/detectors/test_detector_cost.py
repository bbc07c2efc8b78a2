"""The detectors' shortcuts change nothing they find (their speed is benchmarked, not tested).

The windows in `detector_windows` skip work on the quiet path: a median is
only sorted when a value might exceed a multiple of it, a loss's noise only
worked out when its level does not already rule a spike out, a plateau's
trend only sorted when a count says its median may have fallen far enough.
Each is checked here against the plain computation it stands for, and the
monitor as a whole against one with every shortcut turned off. The NaN/Inf
scan is skipped for a step the training thread saw finite: checked against
the scan itself. The monitor's fused quiet path (`quiet_path`) is checked
against each detector's own `evaluate`: the same anomalies and the same
state, over streams with every kind of fault and odd value.
"""

from __future__ import annotations

import math
import random
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.callbacks.helpers import read_records
from tests.callbacks.loss_streams import STREAMS, Fault, frozen, metrics_stream, spike, stalled
from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.loss import LossPlateauDetector, LossSpikeDetector
from training_platform.callbacks.detectors.loss_start import LossNotDecreasingDetector
from training_platform.callbacks.detectors.monitor import DETECTORS, AnomalyMonitor
from training_platform.callbacks.detectors.rl import EntropyCollapseDetector, NonFiniteDetector
from training_platform.callbacks.detectors.windows import (
    RecentMedian,
    SpikeScale,
    TwoWindowSums,
    level_and_noise,
    median_of,
)
from training_platform.callbacks.wire.records import build_record
from training_platform.callbacks.writer.step_metrics import MetricsMerger, OpenStep


def noisy_values(rng: random.Random, count: int) -> Iterator[float]:
    """Positive, zero-centred or falling values with ties, outliers and jumps."""
    shape = rng.choice(["positive", "centred", "falling"])
    level = rng.choice([0.01, 1.0, 100.0])
    for index in range(count):
        if shape == "positive":
            value = level * (1 + rng.gauss(0, 0.1))
        elif shape == "centred":
            value = rng.gauss(0, level)
        else:
            value = level * (0.2 + math.exp(-index / 100)) * (1 + rng.gauss(0, 0.05))
        roll = rng.random()
        if roll < 0.03:
            value *= rng.choice([5.0, 12.0, 50.0, -20.0])  # outliers of every size
        elif roll < 0.06:
            value = round(value, 1)  # ties
        if index == count // 2 and rng.random() < 0.5:
            level *= rng.choice([0.1, 10.0])  # a regime change
        yield value


class SortedOnSchedule:
    """The plain median the detectors used: re-sorted on the first call with
    at least `known` values after every `size // 10` appends."""

    def __init__(self, size: int, known: int) -> None:
        self.values: deque[float] = deque(maxlen=size)
        self.every = max(1, size // 10)
        self.known = known
        self.stale = self.every
        self.cached = 0.0

    def median(self) -> float:
        if self.stale >= self.every:
            self.cached = median_of(list(self.values))
            self.stale = 0
        return self.cached

    def append(self, value: float) -> None:
        self.values.append(value)
        self.stale += 1


@pytest.mark.parametrize("seed", range(40))
def test_recent_median_says_what_a_scheduled_sort_says(seed: int) -> None:
    rng = random.Random(seed)
    size, known = rng.choice([5, 20, 50, 80]), rng.choice([1, 3, 10])
    factor = rng.choice([0.0, 1.0, 1.5, 3.0, 10.0, -2.0])
    recent, plain = RecentMedian(size, known, factor), SortedOnSchedule(size, known)
    for value in noisy_values(rng, 600):
        if len(plain.values) >= known:
            median = plain.median()
            assert recent.exceeds(value) == (value > factor * median)
            if factor >= 0:
                assert recent.quiet_below <= factor * median
            if rng.random() < 0.2:  # asking for the median early changes nothing
                assert recent.median() == median
        recent.append(value)
        plain.append(value)


@pytest.mark.parametrize("seed", range(40))
def test_spike_scale_gives_the_level_and_noise_of_a_full_recompute(seed: int) -> None:
    rng = random.Random(seed)
    size, known = rng.choice([10, 40, 100]), rng.choice([3, 10])
    scale, plain = SpikeScale(size, known, known), SortedOnSchedule(size, known)
    level = noise = 0.0
    for value in noisy_values(rng, 600):
        if len(plain.values) >= known:
            if plain.stale >= plain.every:  # the old window's refresh, by hand
                values = list(plain.values)
                recent = min(known, size)
                level = median_of(values[-recent:])
                noise = level_and_noise(values)[1]
                plain.stale = 0
            assert scale.level == level
            assert scale.noise() == noise
        scale.append(value)
        plain.append(value)


class DequePairSums:
    """The two windows as a pair of deques with running sums (the old way)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.new: deque[float] = deque()
        self.old: deque[float] = deque()
        self.new_sum = self.old_sum = 0.0
        self.count = 0

    def push(self, value: float) -> None:
        self.new.append(value)
        self.new_sum += value
        if len(self.new) > self.size:
            moved = self.new.popleft()
            self.new_sum -= moved
            self.old.append(moved)
            self.old_sum += moved
            if len(self.old) > self.size:
                self.old_sum -= self.old.popleft()
        self.count += 1
        if self.count % 1024 == 0:
            self.new_sum, self.old_sum = sum(self.new), sum(self.old)


@pytest.mark.parametrize("size", [1, 3, 20])
def test_two_window_sums_match_a_pair_of_deques_to_the_last_bit(size: int) -> None:
    rng = random.Random(size)
    windows = TwoWindowSums(size)
    plain = [DequePairSums(size) for _ in range(3)]
    for _ in range(2500):  # past two re-additions (every 1024 values)
        triple = (rng.gauss(1, 0.3), rng.expovariate(20), rng.uniform(100, 900))
        full = windows.push(*triple)
        for series, value in zip(plain, triple, strict=True):
            series.push(value)
        assert full == (len(plain[0].old) == size)
        assert windows.new == tuple(series.new_sum for series in plain)
        assert windows.old == tuple(series.old_sum for series in plain)


def plain_armed(config: AnomalyConfig, values: list[float]) -> list[bool]:
    """Per value, whether the plateau rule is armed: the trend test on a
    window re-sorted every `window // 10` values, with no count to skip it."""
    window, every = config.window, max(1, config.window // 10)
    early_level: float | None = None
    recent: deque[float] = deque(maxlen=window)
    stale, armed, verdicts = every, False, []
    for index, value in enumerate(values):
        if not armed and index < window:
            if index == window - 1:
                level, noise = level_and_noise(values[:window])
                early_level = level if level > 2.0 * noise else None
        elif not armed and early_level is not None:
            recent.append(value)
            stale += 1
            if len(recent) == window and stale >= every:
                stale = 0
                level, noise = level_and_noise(recent)
                drop = max(config.loss_trend_drop * early_level, 1.25 * noise)
                armed = early_level - level >= drop
        verdicts.append(armed)
    return verdicts


@pytest.mark.parametrize("seed", range(30))
def test_the_trend_count_arms_the_plateau_rule_exactly_when_the_sort_does(seed: int) -> None:
    rng = random.Random(seed)
    config = AnomalyConfig(
        window=rng.choice([10, 20, 50]), loss_trend_drop=rng.choice([0.02, 0.1, 0.5])
    )
    values = list(noisy_values(rng, 800))
    detector = LossPlateauDetector(config)
    armed = []
    for step, value in enumerate(values):
        detector.evaluate(step, {"loss": {"critic_loss": value}})
        armed.append(detector._progress["critic_loss"].armed)
    assert armed == plain_armed(config, values)


@pytest.mark.parametrize("seed", range(30))
def test_the_start_rules_counts_say_what_the_median_says(seed: int) -> None:
    """`loss_not_decreasing` keeps two counts instead of sorting its last block:
    each verdict is the one the median of that block gives."""
    rng = random.Random(seed)
    config = AnomalyConfig(
        loss_patience=rng.choice([10, 20, 50]),
        min_history=rng.choice([3, 10]),
        loss_start_warmup=rng.choice([0, 10]),
    )
    detector = LossNotDecreasingDetector(config)
    watch = detector.watches["critic_loss"]
    values: list[float] = []
    for step, value in enumerate(noisy_values(rng, 600)):
        if watch.done:
            break
        held = watch.holding is not None
        detector.evaluate(step, {"loss": {"critic_loss": value}})
        values.append(value)
        if len(values) < config.loss_start_judged_at:
            assert watch.holding is None and not watch.done
            continue
        current = median_of(values[-config.loss_block :])
        if watch.done:  # improved, or no direction at the first judgement
            assert watch.holding is None
            assert current <= watch.clear_at or len(values) == config.loss_start_judged_at
        else:
            assert current > watch.clear_at
            assert (watch.holding is not None) == (held or current > watch.flag_at)


def without_shortcuts(monitor: AnomalyMonitor) -> None:
    """Turn every shortcut of `monitor`'s detectors off (call after each record)."""
    for detector in monitor.detectors:
        if isinstance(detector, LossSpikeDetector):
            detector._level_factor = 0.0  # every value asks for the noise
        if isinstance(detector, LossPlateauDetector):
            for progress in detector._progress.values():
                if progress.early_level is not None and progress.trend_limit != math.inf:
                    # Set as the early level is (the window is still empty):
                    # every value counts, so every point sorts.
                    assert not progress.recent
                    progress.trend_limit = math.inf
        histories: Any = getattr(detector, "_history", {})
        for history in histories.values() if isinstance(histories, dict) else [histories]:
            history.quiet_below = -math.inf  # every value asks for the median


def faults(rng: random.Random, key: str, steps: int) -> Fault | None:
    onset = rng.randint(60, steps - 60)
    return rng.choice(
        [None, spike(key, onset, rng.choice([3.0, 10.0, 30.0])), frozen(key, onset),
         stalled(key, onset)]
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(12))
def test_the_monitor_finds_the_same_with_and_without_its_shortcuts(seed: int) -> None:
    rng = random.Random(seed)
    stream = STREAMS[seed % len(STREAMS)]
    key = rng.choice([k for k in (stream.policy_key, stream.falling_key) if k is not None])
    steps = 700
    fault = faults(rng, key, steps)
    config = AnomalyConfig(
        window=rng.choice([20, 50]),
        loss_patience=rng.choice([20, 50]),
        loss_spike_factor=rng.choice([3.0, 10.0]),
        grad_spike_factor=rng.choice([1.3, 10.0]),
        kl_spike_factor=rng.choice([1.2, 10.0]),
        kl_spike_min=0.0,
    )
    fast, exact = AnomalyMonitor(config), AnomalyMonitor(config)
    found_fast, found_exact = [], []
    for step, metrics in metrics_stream(stream, steps, fault, seed):
        record = build_record(step, metrics, timestamp=1.0e9 + step)
        without_shortcuts(exact)
        found_fast.append(fast.check(record))
        found_exact.append(exact.check(record))
    assert found_fast == found_exact
    # Not vacuous: the streams and thresholds above do raise anomalies.
    if seed < 4:
        assert any(found_fast)


def odd_values(rng: random.Random) -> Any:
    """A metric value of any kind the training thread may be handed."""
    return rng.choice(
        [
            rng.gauss(0, 1), 1.5, 0, 7, -3, 2**70, -(2**70), 10**400, -(10**400),
            1e308, math.nan, math.inf, -math.inf, "NaN", "Infinity", "-Infinity", "text",
            True, None, [2.5], {"mean": rng.choice([0.5, math.nan, 10**400])},
        ]
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(30))
def test_a_step_marked_finite_holds_no_nan_or_inf_for_the_scan_to_find(seed: int) -> None:
    """`OpenStep.finite` lets the writer skip its NaN/Inf scan: never when it
    would find something, whatever the values and however many merges."""
    rng = random.Random(seed)
    merger = MetricsMerger("job")
    marked = 0
    for index in range(300):
        open_step = OpenStep(index)
        for _ in range(rng.choice([1, 1, 2])):
            plain = rng.random() < 0.6
            metrics = {
                f"k{rng.randrange(6)}": rng.gauss(0, 1) if plain else odd_values(rng)
                for _ in range(rng.randint(1, 6))
            }
            merger.merge(open_step, metrics)
        record = build_record(index, open_step.metrics, timestamp=1.0e9)
        if open_step.finite:
            marked += 1
            assert NonFiniteDetector(AnomalyConfig()).evaluate(index, record) is None
    assert marked > 20  # not vacuous: plain steps are marked


def test_huge_ints_that_cancel_in_the_sum_are_not_marked_finite() -> None:
    open_step = OpenStep(1)
    MetricsMerger("job").merge(open_step, {"a": 10**400, "b": -(10**400), "c": 1.0})
    assert not open_step.finite  # `wire` turns each into an infinity
    open_step = OpenStep(2)
    MetricsMerger("job").merge(open_step, {"a": 2**70, "b": 1.0})
    assert open_step.finite  # beyond 64 bits, yet a finite float


@pytest.mark.parametrize("seed", range(6))
def test_the_monitor_finds_the_same_when_told_a_record_is_finite(seed: int) -> None:
    rng = random.Random(seed)
    stream = STREAMS[seed % len(STREAMS)]
    key = rng.choice([k for k in (stream.policy_key, stream.falling_key) if k is not None])
    told, untold = AnomalyMonitor(), AnomalyMonitor()
    merger = MetricsMerger("job")
    found_told, found_untold = [], []
    for step, metrics in metrics_stream(stream, 500, faults(rng, key, 500), seed):
        if rng.random() < 0.02:
            metrics[rng.choice(list(metrics))] = rng.choice([math.nan, math.inf, 10**400])
        open_step = OpenStep(step)
        merger.merge(open_step, metrics)
        record = build_record(step, open_step.metrics, timestamp=1.0e9 + step)
        found_told.append(told.check(record, finite=open_step.finite))
        found_untold.append(untold.check(record))
    assert found_told == found_untold
    assert any(a["type"] == "nan_inf" for found in found_told for a in found)


def with_every_shortcut_off(monitor: AnomalyMonitor) -> None:
    """`without_shortcuts`, and the entropy rule's one comparison too."""
    without_shortcuts(monitor)
    for detector in monitor.detectors:
        if isinstance(detector, EntropyCollapseDetector):
            detector._quiet_from = math.inf  # every value goes through both rules


def entropy_and_gradient_faults(rng: random.Random, onset: int) -> Fault:
    """From `onset` on, entropy sinks towards zero (past its floor) and the
    grad norms get wilder, some beyond the hard limits the test sets."""

    def fault(step: int, metrics: dict[str, Any]) -> None:
        if step < onset:
            return
        for key in ("actor/entropy", "entropy", "objective/entropy", "policy/entropy_avg"):
            if key in metrics:
                metrics[key] *= max(0.0, 1.0 - (step - onset) / 150)
        for key in ("actor/grad_norm", "critic/grad_norm", "grad_norm"):
            if key in metrics and rng.random() < 0.1:
                metrics[key] *= rng.choice([2.0, 8.0, 40.0, math.inf, -1.0])

    return fault


@pytest.mark.parametrize("seed", range(10))
def test_entropy_and_gradient_quiet_paths_find_what_the_rules_find(seed: int) -> None:
    rng = random.Random(seed)
    stream = STREAMS[seed % len(STREAMS)]
    config = AnomalyConfig(
        window=rng.choice([10, 50]),
        grad_spike_factor=rng.choice([1.5, 3.0, 10.0]),
        grad_norm_limit=rng.choice([None, 1.0, 2.5, 10.0]),
        entropy_floor=rng.choice([0.01, 0.2]),
        entropy_drop_fraction=rng.choice([0.3, 0.9]),
        cooldown=rng.choice([0, 20]),
    )
    fast, exact = AnomalyMonitor(config), AnomalyMonitor(config)
    found_fast, found_exact = [], []
    fault = entropy_and_gradient_faults(rng, rng.randint(60, 300))
    for step, metrics in metrics_stream(stream, 500, fault, seed):
        record = build_record(step, metrics, timestamp=1.0e9 + step)
        with_every_shortcut_off(exact)
        found_fast.append(fast.check(record))
        found_exact.append(exact.check(record))
    assert found_fast == found_exact
    kinds = {a["type"] for found in found_fast for a in found}
    # Not vacuous: both rules fire where the stream logs their values.
    assert ("entropy_collapse" in kinds) == (stream.name != "hf_sft")  # no entropy there
    assert ("gradient_explosion" in kinds) == (stream.name != "trl_ppo")  # no grad norm


@pytest.mark.parametrize("background", [True, False])
def test_the_callback_scans_for_nan_only_steps_not_known_finite(
    tmp_path: Path, background: bool
) -> None:
    """The training thread already knows a step of plain finite floats is
    finite: the writer skips its NaN/Inf scan for it, and still runs it (and
    finds the NaN) for any other step."""
    callback = PlatformCallback("run-nan", tmp_path, background=background)
    monitor = callback.monitor
    assert monitor is not None
    scan = monitor.detectors[0]
    assert isinstance(scan, NonFiniteDetector)
    scanned: list[int] = []
    nonfinite: list[int] = []
    evaluate = scan.evaluate

    def counting(step: int, record: Any) -> Any:
        scanned.append(step)
        found = evaluate(step, record)
        if found is not None:
            nonfinite.append(step)
        return found

    scan.evaluate = counting  # type: ignore[method-assign]
    callback.on_train_begin(10)
    for step in range(10):
        metrics: dict[str, Any] = {"actor/pg_loss": 0.1 + 0.01 * step, "actor/grad_norm": 1.0}
        if step == 4:
            metrics["actor/grad_norm"] = math.nan
        if step == 6:
            metrics["timing_s/gen"] = 3  # an int within a float: known finite
        if step == 7:
            metrics["timing_s/gen"] = 10**400  # an inf in the record: scanned
        if step == 8:
            metrics["critic/vf_loss"] = "Infinity"  # a spelling of a number: scanned
        callback.on_step_begin(step)
        callback.on_step_end(step, metrics)
    callback.on_train_end()
    assert scanned == [4, 7, 8]
    assert nonfinite == [4, 7, 8]
    records = read_records(tmp_path / "run-nan_metrics.jsonl")
    flagged = [r["step"] for r in records if r.get("anomalies")]
    assert flagged == [4]  # one incident: 7 and 8 are within its cooldown


# The fused quiet path (`quiet_path.fused_check`) against the detectors' own
# `evaluate`, one call each: the same anomalies and the same state after
# every kind of stream, fault, odd value and setting.


def one_by_one(monitor: AnomalyMonitor) -> AnomalyMonitor:
    """`monitor` without its fused path: each detector's own `evaluate`."""
    monitor._fused = None
    return monitor


def state_of(value: Any) -> Any:
    """Everything a detector keeps, as plain values (floats by repr: NaN == NaN)."""
    if isinstance(value, float):
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, (list, tuple, deque)):
        return [state_of(item) for item in value]
    if isinstance(value, dict):
        return {key: state_of(item) for key, item in value.items()}
    if isinstance(value, AnomalyConfig):
        return None
    names = [n for kind in type(value).__mro__ for n in getattr(kind, "__slots__", ())]
    names += list(getattr(value, "__dict__", {}))
    return {name: state_of(getattr(value, name)) for name in names if hasattr(value, name)}


def record_faults(
    rng: random.Random,
    record: dict[str, Any],
    onset: int,
    kind: str,
    config: AnomalyConfig,
    held: dict[str, float],
) -> None:
    """From `onset` on: KL spikes (some a hair either side of the threshold), a
    reward-hacking ramp (some to a KL just above its floor), losses that move
    by exactly `loss_min_delta`, odd values and groups, or groups left out (another
    tool's run logs some groups, some steps)."""
    step = record["step"]
    if kind == "partial" and step >= onset:
        for group in ("loss", "kl", "gradient", "extra", "reward"):
            if rng.random() < 0.3:
                record.pop(group, None)
    kls = record.get("kl")
    if step >= onset and kind == "kl" and isinstance(kls, dict) and rng.random() < 0.15:
        times = rng.choice([3.0, 12.0, 40.0])
        threshold = config.kl_threshold
        kls["mean"] = rng.choice(
            [times * kls.get("mean", 0.1), threshold, math.nextafter(threshold, math.inf)]
        )
    if step >= onset and kind.startswith("hacking"):
        ramp = min(1.0, (step - onset) / 20)
        start, end = (0.05, 0.45) if kind == "hacking" else (0.02, 0.08)
        record.setdefault("reward", {})["mean"] = 0.5 + 0.3 * ramp
        record.setdefault("kl", {})["mean"] = start + (end - start) * ramp
        record.setdefault("extra", {})["response_length/mean"] = 300.0 * (1 + 1.5 * ramp)
    if step >= onset and kind.startswith("quantized") and isinstance(record.get("loss"), dict):
        # Frozen at a dyadic value, wobbling by exact multiples of a dyadic
        # `loss_min_delta`: a band exactly that wide (or 1.5 times) holds.
        offsets = (0.0, 1.0) if kind == "quantized" else (0.0, 0.5, 1.5)
        for name, value in record["loss"].items():
            base = held.setdefault(name, round(value * 64) / 64)
            record["loss"][name] = base + config.loss_min_delta * rng.choice(offsets)
    if kind == "odd" and rng.random() < 0.08:
        group = rng.choice(["loss", "kl", "gradient", "extra", "reward"])
        if rng.random() < 0.2:
            record[group] = rng.choice([None, [1.0], {"mean": "text"}])
        elif isinstance(record.get(group), dict) and record[group]:
            key = rng.choice(list(record[group]))
            record[group][key] = rng.choice(
                [math.nan, math.inf, -math.inf, None, 3, "NaN", "text", True, -1e300]
            )


def fused_and_one_by_one(seed: int, steps: int) -> tuple[list[Any], list[Any], set[str]]:
    """Both monitors over one random stream: their anomalies, and the kinds found."""
    rng = random.Random(seed)
    stream = STREAMS[seed % len(STREAMS)]
    key = rng.choice([k for k in (stream.policy_key, stream.falling_key) if k is not None])
    kind = rng.choice(
        [
            "loss",
            "kl",
            "hacking",
            "hacking_low_kl",
            "quantized",
            "quantized_wide",
            "odd",
            "entropy_grad",
            "partial",
        ]
    )
    onset = rng.randint(60, steps - 100)
    fault = (
        faults(rng, key, steps)
        if kind == "loss"
        else entropy_and_gradient_faults(rng, onset)
        if kind == "entropy_grad"
        else None
    )
    config = AnomalyConfig(
        window=rng.choice([10, 20, 50]),
        min_history=rng.choice([3, 10, 15]),
        loss_patience=rng.choice([10, 30, 50]),
        loss_spike_factor=rng.choice([3.0, 10.0]),
        loss_spike_warmup=rng.choice([0, 20]),
        grad_spike_factor=rng.choice([1.3, 3.0, 10.0]),
        grad_norm_limit=rng.choice([None, 2.5]),
        kl_spike_factor=rng.choice([1.2, 10.0]),
        kl_threshold=rng.choice([0.3, 1.0]),
        kl_spike_min=rng.choice([0.0, 0.1]),
        loss_min_delta=2.0**-10 if kind.startswith("quantized") else 1e-4,
        entropy_floor=rng.choice([0.01, 0.2]),
        hacking_window=rng.choice([5, 20]),
        cooldown=rng.choice([0, 20]),
    )
    fused, exact = AnomalyMonitor(config), one_by_one(AnomalyMonitor(config))
    assert fused._fused is not None
    found_fused: list[Any] = []
    found_exact: list[Any] = []
    kinds: set[str] = set()
    held: dict[str, float] = {}
    for step, metrics in metrics_stream(stream, steps, fault, seed):
        record = build_record(step, metrics, timestamp=1.0e9 + step)
        record_faults(rng, record, onset, kind, config, held)
        finite = NonFiniteDetector(config).evaluate(step, record) is None and rng.random() < 0.7
        found_fused.append(fused.check(record, finite=finite))
        found_exact.append(exact.check(record, finite=finite))
        kinds.update(a["type"] for a in found_fused[-1])
    assert state_of(fused.detectors) == state_of(exact.detectors)
    return found_fused, found_exact, kinds


@pytest.mark.parametrize("seed", range(60))
def test_the_fused_quiet_path_finds_what_each_detector_finds_on_its_own(seed: int) -> None:
    found_fused, found_exact, _ = fused_and_one_by_one(seed, 600)
    assert found_fused == found_exact


def test_the_fused_path_equivalence_runs_see_every_kind_of_anomaly() -> None:
    """Not vacuous: the streams above raise every anomaly the detectors know."""
    kinds: set[str] = set()
    for seed in range(60):
        kinds |= fused_and_one_by_one(seed, 600)[2]
    assert kinds == {cls.type for cls in DETECTORS}


def test_a_healthy_record_reaches_no_detector_of_the_fused_path() -> None:
    """The fused path is the one taken: after the first values, a healthy
    verl PPO stream calls a detector's own `evaluate` at most on a few records."""
    monitor = AnomalyMonitor()
    calls = _counted(monitor)
    for step, metrics in metrics_stream(STREAMS[0], 1000):
        record = build_record(step, metrics, timestamp=1.0e9 + step)
        assert monitor.check(record, finite=True) == []
        if step == 99:
            calls.clear()  # the first values set the bounds
    assert len(calls) < 100, Counter(calls)


def test_a_record_without_the_rl_groups_reaches_no_detector_of_the_fused_path() -> None:
    """Another tool's run whose keys are all its own (everything under `extra`):
    no group a detector reads, so no detector's own `evaluate` is called."""
    monitor = AnomalyMonitor()
    calls = _counted(monitor)
    for step in range(1000):
        metrics = {f"group{k % 4}/series{k}": 0.001 * step * (k + 1) for k in range(20)}
        assert monitor.check(build_record(step, metrics, timestamp=1.0e9 + step)) == []
    assert Counter(calls) == {"nan_inf": 1000}  # the scan, stateless, reads every group


def _counted(monitor: AnomalyMonitor) -> list[str]:
    """Each call of a detector's own `evaluate` appends the detector's type."""
    calls: list[str] = []
    for detector in monitor.detectors:
        evaluate = detector.evaluate

        def counting(
            step: int, record: Any, evaluate: Any = evaluate, name: str = detector.type
        ) -> Any:
            calls.append(name)
            return evaluate(step, record)

        detector.evaluate = counting  # type: ignore[method-assign]
    return calls


def test_a_disabled_detector_or_a_replaced_list_goes_one_detector_at_a_time() -> None:
    assert AnomalyMonitor(AnomalyConfig(disabled=frozenset({"loss_spike"})))._fused is None
    monitor = AnomalyMonitor()
    monitor.detectors = monitor.detectors[:2]  # the scan and the KL rule only
    record = {"step": 0, "kl": {"mean": 5.0}, "loss": {"total_loss": math.nan}}
    assert [a["type"] for a in monitor.check(record)] == ["nan_inf", "kl_explosion"]
