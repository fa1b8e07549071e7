"""Apply each of the twelve surviving core mutations of issue 11 in turn, and thirteen checks of the
measured core's later mechanisms (the seasonal moments, their level rule, threshold and days, the
trend's supported rise, its floor and whole window, the burn's prior, its negative readings, its miss
estimate and the misses it counts while the ceiling's last group starts, the backtest's clock), run
the test that must catch it, and restore the file: every line must say KILLED.

    .venv/bin/python bench/core_mutations.py
"""
import subprocess
import sys

M = [
 ("autoscaler/core/victim.py", "return (kv, load, -order)", "return (load, kv, -order)", "test_victim_key_is_kv_before_load"),
 ("autoscaler/core/decide.py", "self.lead = lead_time_s(policy, memory)", 'self.lead = (policy.fleet.startup_expected_s, "fleet.startup_expected_s")', "test_decide_uses_the_measured_p95_lead_time"),
 ("autoscaler/core/forecast.py", "projection = level + slope * horizon", "projection = level + slope * horizon / 2", "test_trend_projects_the_whole_horizon"),
 ("autoscaler/core/decide.py", "queued / ready > up.queued_per_group_above", "queued / ready >= up.queued_per_group_above", "test_queue_trigger_is_strictly_above_the_limit"),
 ("autoscaler/core/decide.py", "disruptions=t.memory.disruptions + tuple(t.now for n in names if n not in reclaimed)", "disruptions=t.memory.disruptions", "test_scale_ups_count_against_the_disruption_budget"),
 ("autoscaler/core/bounds.py", "if w.floor_groups is not None and w.floor_groups > floor:", "if w.floor_groups is not None:", "test_overlapping_windows_take_the_highest_floor"),
 ("autoscaler/core/decide.py", "fits = util_after < down.utilization_below", "fits = util_after <= down.utilization_below", "test_scale_down_threshold_is_strict"),
 ("autoscaler/core/decide.py", "t.now - g.since >= down.min_group_uptime_s", "t.now - g.since > down.min_group_uptime_s", "test_min_uptime_is_inclusive"),
 ("autoscaler/core/forecast.py", "[-MAX_STARTUP_SAMPLES:]", "", "test_startup_samples_keep_the_last_twenty"),
 ("autoscaler/core/forecast.py", "while drop < len(samples) and samples[drop][0] <= cutoff:", "while False:", "test_trend_window_is_pruned"),
 ("autoscaler/core/forecast.py", "by_slot[current[0]] = max(by_slot.get(current[0], 0.0), current[1])", "pass", "test_live_ticks_fold_into_the_seasonal_history"),
 ("autoscaler/core/victim.py", 'kv = signals.kv_usage if signals.kv_usage is not None else float("inf")', "kv = signals.kv_usage if signals.kv_usage is not None else 0.0", "test_unknown_kv_is_drained_last"),
 ("autoscaler/core/risk.py", "SEASONAL_WINDOW_SLOTS = 6", "SEASONAL_WINDOW_SLOTS = 0", "test_seasonal_risk_counts_moments_around_the_time_of_day_not_whole_days"),
 ("autoscaler/core/forecast.py", "TREND_CONFIDENCE_Z = 2.0", "TREND_CONFIDENCE_Z = 0.0", "test_trend_projects_only_the_rise_its_fit_bears_out"),
 ("autoscaler/core/forecast.py", "< 0.95 * window", "< 0.45 * window", "test_trend_waits_for_a_whole_window_of_samples"),
 ("autoscaler/core/risk.py", "BURN_PRIOR_MISSES = 10.0", "BURN_PRIOR_MISSES = 1e-9", "test_boldness_is_earned_not_granted_on_thin_evidence"),
 ("autoscaler/core/risk.py", "level = _highest(row, k, k + 2)", "level = _highest(row, k + 1, k + 2)", "test_seasonal_risk_threshold_level_rule_and_missing_days"),
 ("autoscaler/core/risk.py", "bisect_right(growths, (capacity + 1.0) / (level + 1.0))", "bisect_right(growths, capacity / level)", "test_seasonal_risk_threshold_level_rule_and_missing_days"),
 ("autoscaler/core/risk.py", "days_used += found", "days_used += 1", "test_seasonal_risk_threshold_level_rule_and_missing_days"),
 ("autoscaler/core/forecast.py", "(samples[-1][0] - samples[0][0]) * n / (n - 1) <", "(samples[-1][0] - samples[0][0]) <", "test_trend_waits_for_a_whole_window_of_samples"),
 ("autoscaler/core/risk.py", "queued = max(0.0, queued)\n", "\n", "test_negative_readings_count_as_no_misses"),
 ("autoscaler/sim/controllers.py", "replace(g, since=g.since + epoch)", "g", "test_the_backtest_controller_shifts_group_times_onto_the_clock"),
 ("autoscaler/core/forecast.py", "projection = max(level, projection - TREND_CONFIDENCE_Z", "projection = (projection - TREND_CONFIDENCE_Z", "test_the_trends_lower_bound_never_falls_below_the_level"),
 ("autoscaler/core/risk.py", "share = min(1.0, wait / policy.slo.ttft_target_s)", "share = 0.2 * min(1.0, wait / policy.slo.ttft_target_s)", "test_burn_counts_misses_in_proportion_to_the_queue_wait"),
 ("autoscaler/core/decide.py", "len(self.ready) < self.bounds.ceiling", "self.active < self.bounds.ceiling", "test_burn_counts_misses_while_the_ceilings_last_group_starts"),
]
bad = 0
for path, old, new, test in M:
    src = open(path).read()
    assert src.count(old) == 1, (path, old)
    open(path, "w").write(src.replace(old, new))
    try:
        r = subprocess.run([".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/test_core_mutations.py::{test}"], capture_output=True, text=True)
    finally:
        open(path, "w").write(src)
    killed = r.returncode != 0
    bad += not killed
    print("KILLED " if killed else "SURVIVED", test)
sys.exit(bad)
