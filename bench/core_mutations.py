"""Apply each of the twelve surviving core mutations of issue 11 in turn, thirteen checks of the
measured core's later mechanisms (the seasonal moments, their level rule, threshold and days, the
trend's supported rise, its floor and whole window, the burn's prior, its negative readings, its miss
estimate and the misses it counts while the ceiling's last group starts, the backtest's clock), and
the mechanisms of issue 18 (the numbers of each rule's worked example, in tests/test_core_numbers.py:
the window of a rise, the cold-start prior and its blend, "exceeds" at a tie, the seasonal skill,
the burn's half-life, the risk's horizon, the seasonal share in the gate, the pin's clamp, a cap
equal to the floor, the victim above the ceiling; and the cordon's, in tests/test_core_cordon.py:
a cordoned group still starting, the cordon rule's place in the order, its replacement within
the ceiling, its holds; the cold start's rises at tick resolution and the mean reversion of a
rise, in tests/test_core_cold_start.py; the week's tail of rises and the seasonal share that only
raises the risk, in tests/test_core_week.py; the replay's fast paths, in tests/test_core_fast_path.py; the headroom a burning budget buys, in tests/test_core_numbers.py; the session moves a drain is charged, in tests/test_core_sessions.py), run the test that must catch it, and restore the file: every line must
say KILLED.

    .venv/bin/python bench/core_mutations.py            # all of them
    .venv/bin/python bench/core_mutations.py cordon     # those whose test name holds 'cordon'

A test is ``name`` (in tests/test_core_mutations.py) or ``file.py::name`` (in tests/).
"""
import subprocess
import sys

N, C, S, K = "test_core_numbers.py", "test_core_cordon.py", "test_core_scenarios.py", "test_core_cold_start.py"
W = "test_core_week.py"
F = "test_core_fast_path.py"
SE = "test_core_sessions.py"
RQ = "test_risk_in_requests.py"
SI = "test_silence_drain.py"
M = [
 ("autoscaler/core/risk.py", "MAX_BOLDNESS = 2.0", "MAX_BOLDNESS = 4.0", "test_budget_burn_makes_scale_downs_careful_or_bold"),
 ("autoscaler/core/decide.py", "               and floor <= allowed)", "               )", f"{K}::test_a_drain_waits_until_the_rises_can_show_the_risk_within_budget"),
 ("autoscaler/core/decide.py", "    if floor > allowed and judged <= allowed_misses:", "    if False:", f"{K}::test_a_drain_waits_until_the_rises_can_show_the_risk_within_budget"),
 ("autoscaler/core/risk.py", "    return 1.0 / (evidence_minutes(risk) + 2)", "    return 1.0 / (evidence_minutes(risk) + 1)", f"{K}::test_a_drain_waits_until_the_rises_can_show_the_risk_within_budget"),
 ("autoscaler/core/risk.py", "    return risk.week_minutes if risk.p_week is not None else risk.samples", "    return risk.samples", f"{K}::test_a_drain_waits_until_the_rises_can_show_the_risk_within_budget"),
 ("autoscaler/core/risk.py", "SESSION_NOISE_Z = 2.0", "SESSION_NOISE_Z = 0.0", f"{SE}::test_the_worked_example_charges_the_excess_beyond_two_standard_deviations"),
 ("autoscaler/core/risk.py", "if share is not None and arrivals > 0 and not slow:", "if share is not None and arrivals > 0:", f"{SE}::test_a_watch_counts_its_ticks_but_not_the_queued_ones_and_charges_when_it_closes"),
 ("autoscaler/core/risk.py", "    misses += out.pop(\"_charged\", 0.0)", "    out.pop(\"_charged\", 0.0)", f"{SE}::test_a_watch_counts_its_ticks_but_not_the_queued_ones_and_charges_when_it_closes"),
 ("autoscaler/core/decide.py", "watch = open_drain_watch(t.memory, t.now)", "watch: dict = {}", f"{SE}::test_a_drain_that_moves_sessions_is_charged_and_halves_the_risk_a_drain_may_take"),
 ("autoscaler/core/risk.py", "OVER_SHARE_HALF_LIFE_MINUTES * policy.forecast.minute_s", "OVER_SHARE_HALF_LIFE_MINUTES * 30", f"{SE}::test_the_baseline_is_weighted_by_arrivals_and_halves_in_an_hour"),
 ("autoscaler/sim/engine.py", "latency.over / window if window else None", "0.0 if window else None", f"{SE}::test_the_replay_reads_the_share_of_first_tokens_over_the_target"),
 ("autoscaler/core/decide.py", "    if not explain and not fits:\n        return False, \"\", {}", "    if not explain and not fits:\n        return True, \"\", {}", f"{F}::test_the_fast_path_holds_a_drain_the_utilisation_cap_refuses"),
 ("autoscaler/core/decide.py", "and fits and judged <= allowed_misses\n", "and fits\n", f"{W}::test_the_weeks_burst_holds_a_drain_the_three_hours_allow"),
 ("autoscaler/core/risk.py", "            for r in tops:\n                del values[bisect_right(values, r) - 1]", "            pass", f"{F}::test_the_tails_sorted_rises_updated_an_hour_at_a_time_are_the_full_sort"),
 ("autoscaler/core/risk.py", "measured > stop_above and n >= PRIOR_RISES", "n >= PRIOR_RISES", f"{F}::test_a_replay_without_the_holds_numbers_takes_the_same_decisions"),
 ("autoscaler/core/risk.py", "return Risk(measured, measured, None, 0.0, n, 0, resolution, None, week, measured)", "return Risk(measured, measured, None, 0.0, n, 0, resolution, None, 0, measured)", f"{F}::test_the_fast_path_drains_where_the_explained_decision_drains_on_the_weeks_evidence"),
 ("autoscaler/core/risk.py", "    return risk.week_minutes or risk.samples", "    return risk.week_minutes if risk.p_week is not None else risk.samples", f"{F}::test_the_fast_path_drains_where_the_explained_decision_drains_on_the_weeks_evidence"),
 ("autoscaler/core/risk.py", "    return min(MAX_BOLDNESS, burn)\n\n\ndef allowed_risk", "    return 1.0\n\n\ndef allowed_risk", f"{N}::test_headroom_is_the_burn_between_one_and_twice"),
 ("autoscaler/core/risk.py", "    if burn is None or burn <= 1.0:\n        return 1.0\n    return min(", "    if burn is None:\n        return 1.0\n    return min(", f"{N}::test_a_burning_budget_starts_a_group_before_requests_queue"),
 ("autoscaler/core/decide.py", "        self.per_group = self.per_group / self.headroom", "        self.per_group = self.per_group", f"{N}::test_a_burning_budget_starts_a_group_before_requests_queue"),
 ("autoscaler/core/decide.py", "    fits = util_after * room < down.utilization_below", "    fits = util_after < down.utilization_below", f"{N}::test_a_burning_budget_needs_more_room_for_a_drain"),
 ("autoscaler/core/decide.py", "    room = max(t.headroom, headroom(burn_after))", "    room = t.headroom", f"{N}::test_a_drain_leaves_the_headroom_the_burn_after_it_asks_for"),
 ("autoscaler/core/victim.py", "return (kv, load, -order)", "return (load, kv, -order)", "test_victim_key_is_kv_before_load"),
 ("autoscaler/core/decide.py", "self.lead = lead_time_s(policy, memory)", 'self.lead = (policy.fleet.startup_expected_s, "fleet.startup_expected_s")', "test_decide_uses_the_measured_p95_lead_time"),
 ("autoscaler/core/forecast.py", "projection = level + slope * horizon", "projection = level + slope * horizon / 2", "test_trend_projects_the_whole_horizon"),
 ("autoscaler/core/decide.py", "queued / ready > up.queued_per_group_above", "queued / ready >= up.queued_per_group_above", "test_queue_trigger_is_strictly_above_the_limit"),
 ("autoscaler/core/decide.py", "disruptions=t.memory.disruptions + tuple(t.now for n in names if n not in reclaimed)", "disruptions=t.memory.disruptions", "test_scale_ups_count_against_the_disruption_budget"),
 ("autoscaler/core/bounds.py", "if w.floor_groups is not None and w.floor_groups > floor:", "if w.floor_groups is not None:", "test_overlapping_windows_take_the_highest_floor"),
 ("autoscaler/core/decide.py", "fits = util_after * room < down.utilization_below", "fits = util_after * room <= down.utilization_below", "test_scale_down_threshold_is_strict"),
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
 # issue 18: the numbers (tests/test_core_numbers.py)
 ("autoscaler/core/risk.py", "ahead = [_reached(c) for c in closed if k < c[0] <= cur[0]]", "ahead = [_reached(c) for c in closed if k < c[0] < cur[0]]", f"{N}::test_the_rise_is_measured_to_the_busiest_minute_within_one_lead_time"),
 ("autoscaler/core/risk.py", "k = cur[0] - ell  #", "k = cur[0] - ell + 1  #", f"{N}::test_the_rise_is_measured_to_the_busiest_minute_within_one_lead_time"),
 ("autoscaler/core/risk.py", "return max(1, math.ceil(lead_s / minute_s - 1e-9))", "return max(1, round(lead_s / minute_s))", f"{N}::test_lead_minutes"),
 ("autoscaler/core/risk.py", "RECENT_MINUTES = 180", "RECENT_MINUTES = 181", f"{N}::test_recent_rises_are_kept_for_three_hours"),
 ("autoscaler/core/risk.py", "log[cut][0] <= k - RECENT_MINUTES", "log[cut][0] < k - RECENT_MINUTES", f"{N}::test_recent_rises_are_kept_for_three_hours"),
 ("autoscaler/core/decide.py", "demand_changes(memory, policy, now, self.demand, self.risk_horizon)", "demand_changes(memory, policy, now, self.demand)", f"{N}::test_decide_scores_the_seasonal_skill_one_risk_horizon_ahead"),
 ("autoscaler/core/risk.py", "PRIOR_Z_MEAN = 0.5", "PRIOR_Z_MEAN = 0.0", f"{N}::test_the_cold_start_prior_and_its_blend_with_measured_rises"),
 ("autoscaler/core/risk.py", "PRIOR_Z_SD = 0.75", "PRIOR_Z_SD = 1.0", f"{N}::test_the_cold_start_prior_and_its_blend_with_measured_rises"),
 ("autoscaler/core/risk.py", "PRIOR_RISES = 30", "PRIOR_RISES = 20", f"{N}::test_the_cold_start_prior_and_its_blend_with_measured_rises"),
 ("autoscaler/core/risk.py", "p_recent = (n * measured + (PRIOR_RISES - n) * prior) / PRIOR_RISES", "p_recent = (measured + prior) / 2", f"{N}::test_the_cold_start_prior_and_its_blend_with_measured_rises"),
 ("autoscaler/core/risk.py", "first = bisect_right(ordered, z_at)\n", "first = bisect_right(ordered, z_at - 1e-12)\n", f"{N}::test_a_rise_that_reaches_the_capacity_exactly_does_not_exceed_it"),
 ("autoscaler/core/decide.py", "fleet.ttft_p99_s > policy.slo.ttft_target_s", "fleet.ttft_p99_s >= policy.slo.ttft_target_s", f"{N}::test_slo_burn_is_strictly_over_its_thresholds"),
 ("autoscaler/core/decide.py", "capacity_miss = fleet.queue_wait_p99_s > up.slo_burn_min_queue_wait_s", "capacity_miss = fleet.queue_wait_p99_s >= up.slo_burn_min_queue_wait_s", f"{N}::test_slo_burn_is_strictly_over_its_thresholds"),
 ("autoscaler/core/risk.py", "slow = queue_wait_s > policy", "slow = queue_wait_s >= policy", f"{N}::test_the_burn_counts_a_queue_wait_over_its_threshold_not_at_it"),
 ("autoscaler/core/risk.py", "SKILL_HALF_LIFE_SLOTS = 288.0", "SKILL_HALF_LIFE_SLOTS = 144.0", f"{N}::test_the_seasonal_skill_update_of_the_docstring"),
 ("autoscaler/core/risk.py", "a = 1.0 - 0.5 ** (1.0 / SKILL_HALF_LIFE_SLOTS)", "a = 1.0 / SKILL_HALF_LIFE_SLOTS", f"{N}::test_the_seasonal_skill_update_of_the_docstring"),
 ("autoscaler/core/risk.py", "* (prev + 1.0) / (by_slot[then - back] + 1.0))", "* prev / by_slot[then - back])", f"{N}::test_the_seasonal_skill_update_of_the_docstring"),
 ("autoscaler/core/risk.py", "ahead = max(1, math.ceil(lead_s / SLOT_S - 1e-9))\n    then", "ahead = 1\n    then", f"{N}::test_the_seasonal_skill_update_of_the_docstring"),
 ("autoscaler/core/risk.py", "seasonal = preds[len(preds) // 2]", "seasonal = sum(preds) / len(preds)", f"{N}::test_the_seasonal_prediction_is_the_median_over_earlier_days"),
 ("autoscaler/core/risk.py", "BURN_HALF_LIFE_MINUTES = 360.0", "BURN_HALF_LIFE_MINUTES = 180.0", f"{N}::test_the_burn_halves_in_six_hours"),
 ("autoscaler/core/risk.py", "decay = 0.5 ** (max(0.0, now - t) / half_life_s)", "decay = 0.5 ** ((now - t) / half_life_s)", f"{N}::test_the_burn_halves_in_six_hours"),
 ("autoscaler/core/decide.py", "self.risk_horizon = self.lead[0] + scaling.tick_interval_s", "self.risk_horizon = self.lead[0]", f"{N}::test_the_risk_looks_one_start_up_and_one_tick_ahead"),
 ("autoscaler/core/decide.py", "minute_changes(memory, now, self.demand, self.risk_horizon, policy", "minute_changes(memory, now, self.demand, self.lead[0], policy", f"{N}::test_the_risk_looks_one_start_up_and_one_tick_ahead"),
 ("autoscaler/core/decide.py", "exceed_probability(t.memory, policy, t.now, capacity, t.risk_horizon,", "exceed_probability(t.memory, policy, t.now, capacity, t.horizon,", f"{N}::test_the_risk_looks_one_start_up_and_one_tick_ahead"),
 ("autoscaler/core/risk.py", "p = max(p_recent, (1 - weight) * p_recent + weight * (p_seasonal or 0.0))", "p = p_recent", f"{N}::test_the_seasonal_share_can_hold_a_drain_the_recent_rises_allow"),
 ("autoscaler/core/risk.py", "p = max(p_recent, (1 - weight) * p_recent + weight * (p_seasonal or 0.0))", "p = max(p_recent, weight * p_recent + (1 - weight) * (p_seasonal or 0.0))", f"{N}::test_the_seasonal_share_blends_by_its_weight_and_never_lowers_the_risk"),
 ("autoscaler/core/risk.py", "p_seasonal = (over + p_recent) / (len(growths) + 1)", "p_seasonal = over / len(growths)", f"{N}::test_the_seasonal_share_blends_by_its_weight_and_never_lowers_the_risk"),
 ("autoscaler/core/decide.py", 'worst = max(t.demand, t.fc.peak) if t.fc.basis == "seasonal" else t.demand', "worst = max(t.demand, t.fc.peak)", f"{N}::test_a_trusted_seasonal_forecast_counts_in_the_cap_a_trend_does_not"),
 ("autoscaler/core/decide.py", 'worst = max(t.demand, t.fc.peak) if t.fc.basis == "seasonal" else t.demand', "worst = t.demand", f"{N}::test_a_trusted_seasonal_forecast_counts_in_the_cap_a_trend_does_not"),
 ("autoscaler/core/bounds.py", "n = min(max(pin.groups, fleet.floor_groups), fleet.ceiling_groups)", "n = max(pin.groups, fleet.floor_groups)", f"{N}::test_the_pin_is_clamped_to_the_ceiling"),
 ("autoscaler/core/bounds.py", "if ceiling < floor:", "if ceiling <= floor:", f"{N}::test_a_cap_equal_to_the_floor_holds_at_the_ceiling_or_the_floor_not_over_the_cap"),
 ("autoscaler/core/bounds.py", "if ceiling < floor:", "if ceiling <= floor:", f"{N}::test_effective_bounds_table"),
 ("autoscaler/core/bounds.py", "w.floor_groups > floor:", "w.floor_groups >= floor:", f"{N}::test_effective_bounds_table"),
 ("autoscaler/core/bounds.py", "w.ceiling_groups < ceiling:", "w.ceiling_groups <= ceiling:", f"{N}::test_effective_bounds_table"),
 ("autoscaler/core/decide.py", "victim = choose_victim(cordoned or t.ready, t.order, dict(t.signals.groups))", "victim = (cordoned or t.ready)[-1]", f"{N}::test_the_victim_above_the_ceiling"),
 ("autoscaler/core/decide.py", "victim = choose_victim(cordoned or t.ready, t.order, dict(t.signals.groups))", "victim = choose_victim([g for g in t.ready if t.now - g.since >= t.policy.scaling.scale_down.min_group_uptime_s] or t.ready, t.order, dict(t.signals.groups))", f"{N}::test_the_victim_above_the_ceiling"),
 ("autoscaler/core/risk.py", "return max(cur[1] / cur[2], last)", "return cur[1] / cur[2]", f"{N}::test_the_level_is_the_last_closed_minute_or_this_one_when_higher"),
 ("autoscaler/core/risk.py", "memory.minute_max[-1][0] == cur[0] - 1 else 0.0", "True else 0.0", f"{N}::test_the_level_is_the_last_closed_minute_or_this_one_when_higher"),
 ("autoscaler/core/forecast.py", "SEASONAL_TRUST = 0.5", "SEASONAL_TRUST = 0.6", f"{N}::test_the_seasonal_forecast_is_trusted_from_a_weight_of_one_half"),
 ("autoscaler/core/forecast.py", "seasonal_weight(memory) < SEASONAL_TRUST", "seasonal_weight(memory) <= SEASONAL_TRUST", f"{N}::test_the_seasonal_forecast_is_trusted_from_a_weight_of_one_half"),
 ("autoscaler/core/decide.py", "remaining = t.active - 1 - t.spare", "remaining = t.active - 1", f"{N}::test_spare_groups_are_kept_out_of_the_remaining_capacity"),
 ("autoscaler/core/victim.py", "load = (signals.running or 0.0) + (signals.queued or 0.0)", "load = signals.running or 0.0", f"{N}::test_the_victims_load_counts_queued_requests"),
 ("autoscaler/core/decide.py", "now - memory.disruptions[0] >= HOUR_S", "now - memory.disruptions[0] > HOUR_S", f"{N}::test_a_disruption_an_hour_old_is_forgotten"),
 ("autoscaler/core/forecast.py", "keep_from = slot - (policy.forecast.seasonal_days + 1) * (DAY_S // SLOT_S)", "keep_from = slot - policy.forecast.seasonal_days * (DAY_S // SLOT_S)", f"{N}::test_the_seasonal_history_keeps_one_day_more_than_it_reads"),
 ("autoscaler/core/forecast.py", "slots_ahead = max(1, math.ceil(horizon / SLOT_S))", "slots_ahead = max(1, math.floor(horizon / SLOT_S))", f"{N}::test_the_seasonal_forecast_covers_every_slot_the_horizon_touches"),
 ("autoscaler/core/decide.py", 'if t.fc is not None and t.fc.basis != "current":', "if t.fc is not None:", f"{N}::test_a_forecast_that_only_repeats_the_current_demand_starts_nothing"),
 ("autoscaler/core/bounds.py", "(yesterday in window.days and t < end)", "(yesterday in window.days and t <= end)", f"{N}::test_a_window_past_midnight_starts_inside_and_ends_outside"),
 ("autoscaler/core/bounds.py", "(today in window.days and t >= start)", "(today in window.days and t > start)", f"{N}::test_a_window_past_midnight_starts_inside_and_ends_outside"),
 ("autoscaler/core/forecast.py", 'return p95(samples), f"p95 of', 'return max(samples), f"p95 of', f"{N}::test_the_lead_time_is_the_95th_percentile_of_the_start_ups_not_the_slowest"),
 ("autoscaler/core/decide.py", "if starts < want - serving:", "if starts < want:", f"{N}::test_a_scale_up_says_when_it_is_limited_and_only_then"),
 # issue 18: the cordon (tests/test_core_cordon.py, test_core_scenarios.py)
 ("autoscaler/core/decide.py", "self.cordoned = [g for g in self.ready + self.starting if g.cordoned]", "self.cordoned = [g for g in self.ready if g.cordoned]", f"{C}::test_a_cordoned_group_still_starting_does_not_block_a_scale_up"),
 ("autoscaler/core/decide.py", "(_unsynced, _below_floor, _above_ceiling, _scale_up, _cordoned, _signal_problem, _scale_down)", "(_unsynced, _below_floor, _above_ceiling, _cordoned, _scale_up, _signal_problem, _scale_down)", f"{C}::test_a_cordoned_group_still_starting_does_not_block_a_scale_up"),
 ("autoscaler/core/decide.py", "(_unsynced, _below_floor, _above_ceiling, _scale_up, _cordoned, _signal_problem, _scale_down)", "(_unsynced, _below_floor, _above_ceiling, _cordoned, _scale_up, _signal_problem, _scale_down)", f"{C}::test_a_cordoned_group_next_to_a_draining_one_lets_it_come_back"),
 ("autoscaler/core/decide.py", "(_unsynced, _below_floor, _above_ceiling, _scale_up, _cordoned, _signal_problem, _scale_down)", "(_unsynced, _below_floor, _above_ceiling, _scale_up, _signal_problem, _cordoned, _scale_down)", f"{C}::test_a_cordon_waits_for_signals_but_its_floor_replacement_does_not"),
 ("autoscaler/core/decide.py", "(_unsynced, _below_floor, _above_ceiling, _scale_up, _cordoned, _signal_problem, _scale_down)", "(_unsynced, _below_floor, _cordoned, _above_ceiling, _scale_up, _signal_problem, _scale_down)", f"{C}::test_above_the_ceiling_the_cordoned_group_goes_first_whatever_its_kv"),
 ("autoscaler/core/decide.py", "    if want <= serving:\n        return None", "    if want <= t.active:\n        return None", f"{C}::test_a_cordoned_group_is_drained_only_when_the_others_carry_the_load"),
 ("autoscaler/core/decide.py", "if want <= t.active:  # the groups there", "if False:  # the groups there", f"{C}::test_a_cordon_on_a_ceiling_below_the_group_count"),
 ("autoscaler/core/decide.py", "starts = min(want - serving, t.bounds.ceiling - t.active,", "starts = min(want - serving, t.bounds.ceiling - serving,", f"{C}::test_a_cordon_on_a_ceiling_below_the_group_count"),
 ("autoscaler/core/decide.py", "    if t.serving < floor:", "    if sum(not g.cordoned for g in t.ready) < floor:", f"{C}::test_cordon_waits_for_the_replacement_then_drains"),
 ("autoscaler/core/decide.py", "room = t.bounds.ceiling - t.active", "room = 1", f"{C}::test_a_cordon_on_a_ceiling_below_the_group_count"),
 ("autoscaler/core/decide.py", "    if t.starting or t.draining:\n        waits", "    if t.draining:\n        waits", f"{C}::test_a_cordoned_group_is_not_drained_while_another_starts"),
 ("autoscaler/core/decide.py", "    if t.demand is None:\n        held", "    if False:\n        held", f"{C}::test_a_cordon_waits_for_signals_but_its_floor_replacement_does_not"),
 ("autoscaler/core/decide.py", "victim = choose_victim(cordoned or t.ready,", "victim = choose_victim(t.ready,", f"{C}::test_above_the_ceiling_the_cordoned_group_goes_first_whatever_its_kv"),
 ("autoscaler/core/decide.py", "return _start(t, min(floor - t.serving, room), Reason.CORDONED", "return _start(t, 1, Reason.CORDONED", f"{C}::test_a_floor_short_of_two_starts_two_replacements_and_cordoned_groups_drain_in_policy_order"),
 ("autoscaler/core/decide.py", "victim = min(t.cordoned, key=lambda g: t.order[g.name])", "victim = max(t.cordoned, key=lambda g: t.order[g.name])", f"{C}::test_a_floor_short_of_two_starts_two_replacements_and_cordoned_groups_drain_in_policy_order"),
 ("autoscaler/core/decide.py", "(_unsynced, _below_floor, _above_ceiling, _scale_up, _cordoned, _signal_problem, _scale_down)", "(_unsynced, _below_floor, _above_ceiling, _cordoned, _scale_up, _signal_problem, _scale_down)", f"{S}::test_a_cordon_during_a_surge_costs_no_capacity"),
 ("autoscaler/core/decide.py", "victim = choose_victim(cordoned or t.ready,", "victim = choose_victim(t.ready,", f"{S}::test_a_cap_and_a_cordon_on_four_groups_with_differing_kv"),
 # the core's minute (forecast.minute_s, issue 21: the demo's compressed time)
 ("autoscaler/core/risk.py", "minute = int(now // minute_s)", "minute = int(now // MINUTE_S)", f"{N}::test_a_compressed_minute_measures_rises_at_its_own_scale"),
 ("autoscaler/core/decide.py", "changes.update(minute_changes(memory, now, self.demand, self.risk_horizon, policy.forecast.minute_s))", "changes.update(minute_changes(memory, now, self.demand, self.risk_horizon))", "test_core_scenarios.py::test_a_compressed_minute_is_the_policys_own"),
 ("autoscaler/core/risk.py", "if cur is not None and minute < cur[0]:", "if False:", f"{N}::test_a_longer_minute_starts_the_minute_history_afresh"),
 ("autoscaler/core/risk.py", "BURN_HALF_LIFE_MINUTES * minute)", "BURN_HALF_LIFE_S)", f"{N}::test_the_burn_half_life_is_360_of_the_cores_minutes"),
 # the cold start: no drain on the prior alone (issue 18)
 ("autoscaler/core/decide.py", "if risk.samples < need:", "if False:", f"{N}::test_a_drain_waits_for_thirty_measured_rises"),
 ("autoscaler/core/decide.py", "if risk.samples < need:", "if risk.samples < need - 1:", f"{N}::test_a_drain_waits_for_thirty_measured_rises"),
 # a rise reaches halfway to the busiest tick (issue 18: bursts shorter than a minute)
 ("autoscaler/core/risk.py", "PEAK_WEIGHT = 0.5", "PEAK_WEIGHT = 0.0", f"{N}::test_a_rise_reaches_halfway_from_a_minutes_mean_to_its_busiest_tick"),
 ("autoscaler/core/risk.py", "max(_peak(cur), demand)", "_peak(cur)", f"{N}::test_a_rise_reaches_halfway_from_a_minutes_mean_to_its_busiest_tick"),
 # the cold start at tick resolution and the mean reversion of a rise (issue 18, tests/test_core_cold_start.py)
 ("autoscaler/core/risk.py", "if n < PRIOR_RISES and len(memory.tick_rises) > n and policy.scaling.scale_down.tick_rises:", "if False:", f"{K}::test_the_risk_stands_on_the_tick_rises_before_thirty_minutes_are_measured"),
 ("autoscaler/core/risk.py", "if n < PRIOR_RISES and len(memory.tick_rises) > n and policy.scaling.scale_down.tick_rises:", "if False:", f"{K}::test_a_fresh_controller_drains_on_tick_rises_after_nineteen_minutes_not_forty_one"),
 ("autoscaler/core/risk.py", "if n < PRIOR_RISES and len(memory.tick_rises) > n and policy.scaling.scale_down.tick_rises:", "if len(memory.tick_rises) > n and policy.scaling.scale_down.tick_rises:", f"{K}::test_the_risk_stands_on_the_tick_rises_before_thirty_minutes_are_measured"),
 ("autoscaler/core/risk.py", "    if len(memory.rises_sorted) >= PRIOR_RISES:\n        return {\"tick_window\"", "    if False:\n        return {\"tick_window\"", f"{K}::test_the_tick_rises_are_dropped_once_the_minutes_hold_thirty"),
 ("autoscaler/core/risk.py", "start = now - (ell + 1) * minute_s  # the base minute", "start = now - ell * minute_s  # the base minute", f"{K}::test_a_rise_comes_every_tick_measured_as_the_minutes_measure_it"),
 ("autoscaler/core/risk.py", "if window and now <= window[-1][0]:", "if False:", f"{K}::test_the_clock_going_back_starts_the_tick_rises_afresh"),
 ("autoscaler/core/decide.py", "if scaling.scale_down.tick_rises:\n                changes.update(tick_rise_changes(memory, now", "if False:\n                changes.update(tick_rise_changes(memory, now", f"{K}::test_a_fresh_controller_drains_on_tick_rises_after_nineteen_minutes_not_forty_one"),
 ("autoscaler/core/risk.py", "    if reach is not None:\n        # Mean reversion", "    if False:\n        # Mean reversion", f"{K}::test_a_rise_from_a_base_below_todays_level_is_not_scaled_up"),
 ("autoscaler/core/risk.py", "if level + (top - b) > capacity)", "if top > capacity)", f"{K}::test_a_rise_from_a_base_below_todays_level_is_not_scaled_up"),
 ("autoscaler/core/risk.py", "if level + (top - b) > capacity)", "if True)", f"{K}::test_a_rise_from_a_base_below_todays_level_is_not_scaled_up"),
 ("autoscaler/policy/model.py", "        False,\n        description=\"In a cold start", "        True,\n        description=\"In a cold start", f"{K}::test_tick_rises_are_off_by_default"),
 ("autoscaler/core/risk.py", "log = log + ((k, z, base, top),)", "log = log + ((k, z),)", f"{N}::test_the_rise_is_measured_to_the_busiest_minute_within_one_lead_time"),
 # the week's tail and the seasonal share that only raises the risk (issue 18, tests/test_core_week.py)
 ("autoscaler/core/risk.py", "p = max(p_recent, (1 - weight) * p_recent + weight * (p_seasonal or 0.0))", "p = (1 - weight) * p_recent + weight * (p_seasonal or 0.0)", f"{N}::test_the_seasonal_share_blends_by_its_weight_and_never_lowers_the_risk"),
 ("autoscaler/core/risk.py", "if memory.tail_minutes and n >= PRIOR_RISES and resolution == \"minute\":", "if False:", f"{W}::test_a_quiet_three_hours_still_see_the_weeks_burst"),
 ("autoscaler/core/risk.py", "if memory.tail_minutes and n >= PRIOR_RISES and resolution == \"minute\":", "if False:", f"{W}::test_the_weeks_burst_holds_a_drain_the_three_hours_allow"),
 ("autoscaler/core/risk.py", "measured = max(measured, p_week)", "measured = p_week", f"{W}::test_a_busier_three_hours_than_the_week_decide_for_themselves"),
 ("autoscaler/core/risk.py", "if level + (reached - base) > capacity)", "if True)", f"{W}::test_a_quiet_three_hours_still_see_the_weeks_burst"),
 ("autoscaler/core/risk.py", "week_minutes = n + tail_minutes", "week_minutes = tail_minutes", f"{W}::test_a_quiet_three_hours_still_see_the_weeks_burst"),
 ("autoscaler/core/risk.py", "TAIL_PER_HOUR = 24", "TAIL_PER_HOUR = 25", f"{W}::test_an_hour_keeps_its_24_highest_rises_and_counts_every_minute"),
 ("autoscaler/core/risk.py", "(len(tops) < TAIL_PER_HOUR or old[1:] > tops[0])", "(len(tops) < TAIL_PER_HOUR)", f"{W}::test_an_hour_keeps_its_24_highest_rises_and_counts_every_minute"),
 ("autoscaler/core/risk.py", "np.count_nonzero(u[at:] > capacity - level)", "np.count_nonzero(u[at:] == u[at:])", f"{W}::test_a_quiet_three_hours_still_see_the_weeks_burst"),
 ("autoscaler/core/risk.py", "closed_changed = closed_changed or bool(tail)", "closed_changed = False", f"{W}::test_a_rise_leaving_the_three_hours_joins_its_hour"),
 ("autoscaler/core/risk.py", "if closed_changed or cut:", "if closed_changed:", f"{W}::test_the_tail_keeps_seven_days_with_the_three_hours"),
 ("autoscaler/adapters/snapshot_file.py", "tail_sorted=closed_tail_rises(tail),", "tail_sorted=(),", f"{W}::test_the_tail_round_trips_through_a_snapshot_and_rejects_a_bad_one"),
 ("autoscaler/core/risk.py", "TAIL_HOURS = 165", "TAIL_HOURS = 168", f"{W}::test_the_tail_keeps_seven_days_with_the_three_hours"),
 ("autoscaler/core/risk.py", "first_hour = (minute - RECENT_MINUTES) // 60 - TAIL_HOURS", "first_hour = minute // 60 - TAIL_HOURS", f"{W}::test_the_tail_keeps_seven_days_with_the_three_hours"),
 ("autoscaler/core/risk.py", "        _, count, tops = tail[-1]\n        total += 1\n", "        _, count, tops = tail[-1]\n", f"{W}::test_a_rise_leaving_the_three_hours_joins_its_hour"),
 ("autoscaler/core/risk.py", "out.update(tail_changes(memory, aged, k))", "pass", f"{W}::test_folding_minutes_moves_the_rises_older_than_three_hours_into_the_tail"),
 ("autoscaler/core/risk.py", "\"rise_reach\": (), \"rise_tail\": (), \"tail_sorted\": (), \"tail_minutes\": 0}", "\"rise_reach\": ()}", f"{W}::test_the_clock_going_back_clears_the_tail_with_the_minutes"),
 ("autoscaler/adapters/snapshot_file.py", "tail_minutes=sum(c for _, c, _ in tail),", "", f"{W}::test_the_tail_round_trips_through_a_snapshot_and_rejects_a_bad_one"),
 ("autoscaler/adapters/snapshot_file.py", "if out and v[0] <= out[-1][0]:", "if False:", f"{W}::test_the_tail_round_trips_through_a_snapshot_and_rejects_a_bad_one"),
 # the three days' burn (tests/test_core_numbers.py): its half-life, counted at each tick, charged at a drain, the higher of the two
 ("autoscaler/core/risk.py", "BURN_LONG_HALF_LIFE_MINUTES = 4320.0", "BURN_LONG_HALF_LIFE_MINUTES = 360.0", f"{N}::test_the_long_burn_halves_in_three_days_and_counts_the_same_misses"),
 ("autoscaler/core/risk.py", '        out["budget_burn_long"] = burn', '        pass', f"{N}::test_the_long_burn_halves_in_three_days_and_counts_the_same_misses"),
 ("autoscaler/core/risk.py", "    for key in (\"budget_burn\", \"budget_burn_long\"):\n        b = getattr(memory, key)\n        out[key] = (misses", "    for key in (\"budget_burn\",):\n        b = getattr(memory, key)\n        out[key] = (misses", f"{N}::test_a_drain_charges_its_session_moves_to_both_burns"),
 ("autoscaler/core/risk.py", "    return long if short is None or long > short else short", "    return short", f"{N}::test_a_budget_overspent_over_days_starts_a_group_the_six_hours_would_not"),
 ("autoscaler/core/risk.py", "    return long if short is None or long > short else short", "    return long", f"{N}::test_the_burn_is_the_higher_of_six_hours_and_three_days"),
# the drain's risk in requests (tests/test_risk_in_requests.py)
 ("autoscaler/core/decide.py", "capacity, t.bounds.ceiling * t.base_per_group,", "capacity, capacity + t.base_per_group / room,", f"{RQ}::test_a_drain_is_judged_against_always_on_not_against_one_group_more"),
 ("autoscaler/core/decide.py", "capacity, t.bounds.ceiling * t.base_per_group,", "capacity, t.bounds.ceiling * t.per_group,", f"{RQ}::test_a_drain_is_judged_against_always_on_not_against_one_group_more"),
 ("autoscaler/core/risk.py", "    return (a if a < 1.0 else 1.0) - (0.0 if b <= 0.0 else b if b < 1.0 else 1.0)", "    return a if a < 1.0 else 1.0", f"{RQ}::test_the_added_share_at_one_height"),
 ("autoscaler/core/risk.py", "    weight_per_moment = min(1.0, excess_minutes / lead_minutes(lead_s, policy.forecast.minute_s))", "    weight_per_moment = 1.0", f"{RQ}::test_the_docstring_example"),
 ("autoscaler/core/decide.py", "    judged = misses.share if misses is not None else", "    judged = risk.probability if risk is not None else", f"{RQ}::test_a_drain_judged_in_requests_where_the_chance_of_an_excess_holds"),
 ("autoscaler/core/decide.py", "    allowed_in_requests = min(allowed, policy.slo.capacity_miss_budget_pct / 100.0)", "    allowed_in_requests = allowed", f"{RQ}::test_an_unspent_budget_allows_no_more_than_itself_in_requests"),
 ("autoscaler/core/risk.py", "    return min(d, 24 - d) <= within_h", "    return True", f"{RQ}::test_the_tail_seen_from_this_time_of_day_keeps_only_the_hours_near_it"),
 ("autoscaler/core/risk.py", "    return min(d, 24 - d) <= within_h", "    return d <= within_h", f"{RQ}::test_the_tail_seen_from_this_time_of_day_keeps_only_the_hours_near_it"),
# the silence drain (issue 33), in tests/test_silence_drain.py
 ("autoscaler/core/decide.py", "        if silence is not None and silence[1] == t.now and t.now - silence[0] >= down.silence_s:", "        if False:", f"{SI}::test_a_silent_fleet_drains_on_the_return_risk_where_the_chance_of_an_excess_holds"),
 ("autoscaler/core/decide.py", "    surplus = ret is not None and measured and ret.misses <= ret.allowed", "    surplus = ret is not None and measured", f"{SI}::test_no_silence_drain_when"),
 ("autoscaler/core/decide.py", "    measured = len(t.memory.rises_sorted) >= down.min_measured_rises", "    measured = True", f"{SI}::test_a_silence_drain_waits_for_the_measured_history"),
 ("autoscaler/core/decide.py", "    always_on = t.bounds.ceiling * t.base_per_group\n", "    always_on = t.bounds.ceiling * t.base_per_group / room\n", f"{SI}::test_the_stake_is_against_always_on_at_the_ceiling_whatever_the_fleet_and_the_burn"),
 ("autoscaler/core/decide.py", "    always_on = t.bounds.ceiling * t.base_per_group\n", "    always_on = t.active * t.base_per_group\n", f"{SI}::test_the_stake_is_against_always_on_at_the_ceiling_whatever_the_fleet_and_the_burn"),
 ("autoscaler/core/decide.py", "                changes.update(traffic_changes(memory, now, fl.request_rate, self.demand, scaling.tick_interval_s))", "                pass", f"{SI}::test_a_fleet_that_goes_quiet_drains_after_the_silence_s_it_observed"),
 ("autoscaler/core/decide.py", "            memory = memory.with_(silence=None)", "            pass", f"{SI}::test_unknown_demand_ends_a_silence"),
 ("autoscaler/core/risk.py", "SILENCE_BUDGET_SHARE = 0.5", "SILENCE_BUDGET_SHARE = 1.0", f"{SI}::test_the_return_risk_worked_example"),
 ("autoscaler/core/risk.py", "    if rate is not None and rate == 0.0 and demand == 0.0:", "    if rate is not None and rate == 0.0:", f"{SI}::test_no_silence_drain_when"),
 ("autoscaler/core/risk.py", "<= now - prev_silence[1] <= 2.0 * step_s", "<= now - prev_silence[1] <= math.inf", f"{SI}::test_a_silence_is_observed_tick_by_tick"),
 ("autoscaler/core/risk.py", "    a = 1.0 - math.exp(-min(max(now - prev[0], 0.0), step_s) / TRAFFIC_SMOOTHING_S)", "    a = 1.0 - math.exp(-max(now - prev[0], 0.0) / TRAFFIC_SMOOTHING_S)", f"{SI}::test_traffic_is_smoothed_over_ten_minutes_of_ticks_and_kept_through_a_silence"),
 ("autoscaler/core/risk.py", "    if rate is None or not rate > 0.0:\n        return out", "    if rate is None:\n        return out", f"{SI}::test_traffic_is_smoothed_over_ten_minutes_of_ticks_and_kept_through_a_silence"),
 ("autoscaler/core/risk.py", "                                float(minutes), level=level)", "                                float(minutes))", f"{SI}::test_the_return_risk_worked_example"),
 ("autoscaler/core/risk.py", "    misses = share.share * rate * lead_s", "    misses = share.share * lead_s", f"{SI}::test_the_return_risk_worked_example"),
]
only = sys.argv[1] if len(sys.argv) > 1 else ""
bad = 0
for path, old, new, test in M:
    if only not in test:
        continue
    src = open(path).read()
    assert src.count(old) == 1, (path, old)
    open(path, "w").write(src.replace(old, new))
    node = f"tests/{test}" if "::" in test else f"tests/test_core_mutations.py::{test}"
    try:
        r = subprocess.run([".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", node], capture_output=True, text=True)
    finally:
        open(path, "w").write(src)
    # Killed means the test failed on an assertion, not that the mutant could not be collected.
    killed = r.returncode == 1
    bad += not killed
    print("KILLED " if killed else "SURVIVED" if r.returncode == 0 else f"ERROR {r.returncode}", test.split("::")[-1],
          f"({path.split('/')[-1]}: {new.strip()[:60]!r})" if only else "")
sys.exit(bad)
