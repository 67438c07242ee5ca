"""Sampled formula-mutation score of montecarlo, of the feature-kind code and of theory's OPRF closed forms (group
``oprf_theory``): the targets, the test command of each, and a runner built on ``../shared/tools/mutate.py`` (its
mutation sites and operators, unchanged).

``mutate.py`` samples mutants over all the files it is given and runs one command on each.  Here every target
(a file, optionally restricted to some functions) has its own targeted test command, and the sample of a group
is drawn uniformly from the union of its targets' mutation sites, exactly as ``mutate.py`` draws it
(``random.Random(seed).sample(pool, n)``; a site is ``(file, i)`` with ``i`` the index in ``mutate.sites``'
walk order, so a mutant is the same edit ``mutate.py`` makes).  Each mutant runs only the command of its target,
on a scratch copy of the checkout, and is reported as killed (the command failed), timeout (counted as killed,
as mutate.py does, but listed) or survived, with the mutated expression so that a survivor can be classified.

Usage (from the checkout)::

    python tests/mutation_targets.py --group montecarlo --sample 80 --seed 22 [--tests before|after]
    python tests/mutation_targets.py --group kinds --sample 70 --seed 22 --json out.json
    python tests/mutation_targets.py --target oprf_a --sample 20 --seed 1 --timeout 400
    python tests/mutation_targets.py --list          # targets, sites and commands

``--tests before`` uses the existing tests only (the measurement before the mutation tests existed: the classes
``TestCouplings`` ... ``TestDimensionBits`` in the modules' test files);
``after`` (default) adds this project's mutation tests.  The record of the runs is docs/guide/mutation.rst.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/: run as a script or imported by the tests
from _procs import run_group  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MUTATE = ROOT.parent / "shared" / "tools" / "mutate.py"

PYTEST = "python -m pytest -q -x -p no:cacheprovider"

T = "tests/"

#: The tests of the tiny-v closed forms: one selection for both tiny-v targets (theory/mse.py and conformities.py).
TINY_V_TESTS = [
    "tests/test_theory_mse.py -k '(test_hyperbolic_simplex_at_tiny_v_is_the_limit or "
    "test_orthogonality_gaps_at_tiny_v_against_the_positive_series or test_other_kinds_through_the_prf_excess"
    " or test_pnc_ratio_at_tiny_v_is_the_limit or test_rff_asymptotic_ratio_at_tiny_z or "
    "test_rff_ratio_at_tiny_z_is_the_limit or test_simplex_prf_mse_where_the_v4_term_shows or "
    "test_simplex_prf_ratio_at_tiny_v_is_the_limit or test_small_arg_bits_cap_is_exactly_the_documented_one "
    "or test_small_arg_bits_cap_is_loud or test_v4_coefficient_against_the_chi_moments or "
    "test_v4_coefficient_against_the_taylor_route) and not (TestKernelMse)'",
    "paper_checks/test_beyond.py -k v4",
]

#: Existing fast tests per target (the "before" commands): pytest argument strings, one pytest run each.  Each
#: target's run takes seconds on the 2-core machine; tests that failed on the unmutated tree when this was set up
#: (other engineers' work in progress) are deselected.  Since the tests mirror the library modules (issue 39 item
#: 7) a command names the tests of the file it ran before by name, in the files that now hold them, and leaves
#: out the mutation tests' classes (the "after" commands).
BEFORE = {
    "couplings": [
        "tests/test_montecarlo_couplings.py -k '(not (pass_the_audit and simplex_plus)) and "
        "((test_algorithm1_equals_dense_s or test_batch_draws_and_reproducibility or "
        "test_block_geometry_is_rotation_of_reference or test_docstring_examples or test_dtype_and_float32 or "
        "test_fast_coupling_bias_at_d_4_is_resolved or test_fast_couplings_warn_where_their_bias_is_measurable or"
        " test_fast_partial_rows_equal_the_first_rows_of_the_full_block or "
        "test_fast_projection_matches_dense_weights or test_few_rows_in_high_dimension_cost_o_m_d_memory or "
        "test_fwht_and_simplex_apply_near_the_largest_float or test_fwht_is_normalised_hadamard or "
        "test_fwht_near_the_largest_float32_on_torch or "
        "test_haar_columns_are_the_first_columns_and_refuse_bad_cols or test_haar_routes_orthogonal or "
        "test_partial_blocks_have_the_exact_geometry or test_partial_blocks_pass_the_audit or "
        "test_sample_weights_bad_input or test_shapes_and_block_structure or test_simplex_apply_bad_input or "
        "test_simplex_block_cosines_and_zero_sum or test_simplex_matrix_matches_theory_and_closed_gram or "
        "test_simplex_plus_in_high_dimension_is_refused_not_attempted or "
        "test_simplex_plus_matches_theory_reference or test_simplex_plus_reports_passes_and_handles_the_cap) and "
        "not (TestCouplings))'",
    ],
    "estimators": [
        "tests/test_montecarlo_estimators.py -m 'not slow' -k '(not 16 and not 64 and not pnc and not "
        "simplex_plus and not conformity_matches and not many_trials and not gram) and "
        "((test_a_million_trials_chunked or test_chan_merge_equals_numpy or test_estimator_bad_input or "
        "test_fast_couplings_pointwise_paths_agree or test_fast_path_agrees_with_full_path or "
        "test_fast_path_power_wrong_geometry or test_kernel_estimates_are_unbiased or test_pair_moments_matrix or"
        " test_pointwise_estimators_do_not_overflow or test_prf_mse_matches_theory or "
        "test_removed_shims_are_ordinary_errors or test_reproducible_and_progress_callback or "
        "test_rff_conformity_and_mse_match_theory or test_softmax_prf_mse_matches_theory or "
        "test_unsigned_qr_biases_prf_but_rff_hides_it) and not (TestEstimators))'",
    ],
    "features": [
        "tests/test_montecarlo_features.py -k '(test_estimator_classes or test_feature_bad_input or "
        "test_large_inputs_do_not_overflow_and_stabilised_form or test_prf_bad_kernel_and_stabilize or "
        "test_prf_gaussian_matches_definition or test_rff_matches_definition_and_kernel_identity or "
        "test_row_blocks_respect_threadpool_limits or test_rows_near_the_largest_float_are_refused_by_every_kind "
        "or test_stabilised_attention_is_exact_and_absolute_values_are_not) and not (TestFeatures)'",
    ],
    "pnc": [
        "tests/test_kind_pnc.py -k '(norms_are_chi or monte_carlo_conformity or registered) and "
        "((test_monte_carlo_conformity or test_norms_are_chi_and_antithetic or "
        "test_registered_through_the_registry) and not (TestPnc))'",
    ],
    "norm_coupling": [
        "tests/test_montecarlo_norm_coupling.py -k '(not 16-0.5) and ((test_bad_input or "
        "test_conformity_quadrature_against_monte_carlo or test_equal_norms_beat_simplex_at_small_v_and_d4_mse or"
        " test_iid_closed_form_against_double_quadrature or test_norms_are_marginally_chi or "
        "test_rows_are_marginally_gaussian or test_small_v_expansion_equal_norms or "
        "test_truncated_block_has_the_law_of_the_first_rows_of_a_full_block or "
        "test_truncated_block_memory_is_o_of_d_m) and not (TestNormCoupling))'",
    ],
    "feature_kinds": [
        "tests/test_theory_feature_kinds.py --deselect "
        "tests/test_theory_feature_kinds.py::test_one_copy_of_the_prf_formula -k "
        "'(test_every_declared_hook_is_registered or test_import_montecarlo_loads_no_closed_form or "
        "test_kernel_mse_of_the_named_forms or test_linear_form_is_the_log_feature_map or "
        "test_lookups_name_the_kinds or test_mean_conformity_of_every_kind_against_its_definition or "
        "test_montecarlo_layers_have_no_circle or test_one_copy_of_the_prf_formula or "
        "test_one_map_for_numpy_and_torch or test_theory_never_imports_montecarlo) and not (TestRegistry)'",
    ],
    "mc_hyperbolic": [
        "tests/test_kind_hyperbolic.py -k '(feature_map or gram_and or monte_carlo_agrees) and "
        "((test_feature_map_written_out or test_gram_and_conformity_estimates or "
        "test_monte_carlo_agrees_with_the_closed_form) and not (TestHyperbolicMap or TestHyperbolicTheory))'",
        "tests/test_theory_feature_kinds.py -k '(test_one_map_for_numpy_and_torch) and not (TestRegistry)'",
    ],
    "mc_oprf": [
        "tests/test_kind_oprf.py -k '(feature_map or monte_carlo_agrees or conformity_estimate or "
        "optimal_a_minimises or bad_input or unbiased) and ((test_bad_input or "
        "test_conformity_estimate_against_mean_conformity or "
        "test_fast_couplings_unbiased_where_d_is_not_a_power_of_two or test_feature_map_written_out_and_float32 "
        "or test_monte_carlo_agrees_with_the_closed_form or test_optimal_a_minimises_the_second_moment or "
        "test_unbiased_for_every_coupling_and_a) and not (TestOprfMap or TestOprfTheory or TestOptimalA or "
        "TestOprfMse))'",
        "tests/test_theory_feature_kinds.py -k '(test_one_map_for_numpy_and_torch) and not (TestRegistry)'",
    ],
    "th_hyperbolic": [
        "tests/test_kind_hyperbolic.py -k '(not 8-2.0 and not monte_carlo and not optimal_sampled and not "
        "feature_map and not gram) and ((test_certified_ordering or test_couplings_without_a_closed_form or "
        "test_orthogonal_beats_simplex_and_norm_coupling_beats_orthogonal or "
        "test_pair_term_against_a_quadrature_over_the_norms or "
        "test_pair_term_of_norm_coupled_pairs_by_the_second_route or "
        "test_single_direction_variance_is_a_fraction_of_the_prf_one or test_small_v_limit or "
        "test_the_issue_numbers) and not (TestHyperbolicMap or TestHyperbolicTheory))'",
    ],
    "th_oprf": [
        "tests/test_kind_oprf.py -k '(not monte_carlo and not unbiased and not feature_map and not 3-1.0) and "
        "((test_bad_input or test_batch_pair_statistic_is_the_mean_over_unpadded_pairs or "
        "test_certified_mse_contains_the_value or test_conformity_estimate_against_mean_conformity or "
        "test_couplings_without_a_closed_form or test_data_parameters_rule_is_the_optimal_a_on_every_backend or "
        "test_domain_tiny_huge_v_and_large_d or "
        "test_fast_projection_row_norms_and_oprf_features_match_the_dense_rows or "
        "test_optimal_a_minimises_the_second_moment or test_pnc_oprf_at_v_1e_300 or test_pnc_optimal_a_at_small_v"
        " or test_pnc_optimal_a_golden_fallback_and_tiny_v or test_pnc_optimal_a_is_a_minimum or "
        "test_pnc_pair_derivative_two_routes_and_secant_at_30_digits or test_pnc_pair_excess_two_routes or "
        "test_pnc_pair_term_depends_on_a_and_reduces_to_pnc or test_theorem_pair_term_does_not_depend_on_a) and "
        "not (TestOprfMap or TestOprfTheory or TestOptimalA or TestOprfMse))'",
    ],
    "fused_scans": [
        "tests/test_nn_fused.py -k '(chunk_offsets or state_scan or causal_operator or host_overhead or "
        "module_with_fused or compiled_causal or ratio) and (test_causal_operator_backward_is_the_gradient or "
        "test_causal_operator_equals_the_dense_form or test_causal_operator_reads_half_values or "
        "test_chunk_offsets_are_the_running_maxima or test_chunk_offsets_propagate_nan or "
        "test_compiled_causal_scan_calls_the_kernels or test_custom_operator_registration or "
        "test_host_overhead_benchmark_counts_the_step or test_module_with_fused_kernels_equals_the_torch_path or "
        "test_ratio_kernels_equal_the_torch_ratio or test_ratio_writes_the_shape_asked_for or "
        "test_state_scan_kernels_equal_the_product)'",
    ],
    "fused_products": [
        "tests/test_nn_fused.py -k '(bf16 or precision or tile_shapes or feature_blocks) and "
        "(test_bf16_products_error or test_bf16_products_of_float64_tiles or "
        "test_bf16_rounding_is_to_nearest_even or test_cuda_bf16_products_error or "
        "test_feature_blocks_follow_the_rule or test_kernels_compile_within_the_registers or "
        "test_precision_is_checked or test_products_precision_follows_the_inputs or test_tile_shapes_are_legal)'",
    ],
    "fused_launch": [
        "tests/test_nn_fused.py -k '(launch_cache or features_products or linear_features or feature_blocks) and "
        "(test_cuda_features_products_error or test_cuda_launch_cache_equals_the_jit_entry or "
        "test_feature_blocks_follow_the_rule or test_features_products_error or "
        "test_features_products_follow_the_dtype or "
        "test_launch_cache_reuses_the_compiled_kernel_per_specialisation or "
        "test_launch_cache_turns_itself_off_when_the_runner_refuses or "
        "test_linear_features_kernel_equals_the_torch_map)'",
    ],
    "fused_host": [
        "tests/test_nn_fused.py -k '(feature_rows or keeps_the_features or grids_are_kept or linear_features or "
        "kernels_equal or causal_operator_equals or host_overhead or ratio_writes or broadcast_shapes or "
        "module_with_fused) and (test_broadcast_shapes_helper_equals_torchs or "
        "test_causal_operator_equals_the_dense_form or test_causal_scan_with_fused_kernels_equals_the_levels or "
        "test_feature_rows_and_scaled_features_check_their_inputs or test_grids_are_kept_per_shape_and_settings "
        "or test_host_overhead_benchmark_counts_the_step or test_kernels_equal_the_masked_quadratic_form or "
        "test_linear_features_kernel_equals_the_torch_map or test_module_keeps_the_features_rows_while_they_hold "
        "or test_module_with_fused_kernels_equals_the_torch_path or test_ratio_kernels_equal_the_torch_ratio or "
        "test_ratio_writes_the_shape_asked_for or "
        "test_second_derivatives_through_the_kernels_equal_the_torch_path or "
        "test_state_scan_kernels_equal_the_product)'",
    ],
    "nn_func": [
        "tests/test_nn_module.py -k '(torch_func or vmap_and or torch_export or oprf_data_driven or meta_device) "
        "and (test_cuda_torch_func_and_export or test_meta_device_and_reset_parameters or "
        "test_oprf_data_driven_a_ignores_padded_content or test_oprf_data_driven_a_is_a_constant_of_the_backward "
        "or test_torch_export_refuses_the_redraw_schedule or test_torch_export_round_trip_equals_eager or "
        "test_torch_func_jacobians_and_hessians_equal_autograds or "
        "test_torch_func_refuses_running_statistics_in_training or test_vmap_and_per_sample_gradients)'",
        "tests/test_nn_module.py -k '(autocast or torch_compile) and (test_autocast_keeps_features_in_float32 or "
        "test_torch_compile or test_torch_compile_with_redraws)'",
    ],
    "nn_host": [
        "tests/test_nn_fused.py -k '(keeps_the_features or broadcast_shapes or causal_scan_with or "
        "module_with_fused or ratio_writes or broadcast_leading or host_overhead) and "
        "(test_broadcast_shapes_helper_equals_torchs or "
        "test_causal_broadcast_leading_shapes_equal_the_expanded_inputs or "
        "test_causal_scan_with_fused_kernels_equals_the_levels or test_host_overhead_benchmark_counts_the_step or"
        " test_module_keeps_the_features_rows_while_they_hold or "
        "test_module_with_fused_kernels_equals_the_torch_path or test_ratio_writes_the_shape_asked_for)'",
        "tests/test_nn_module.py -x -k '(causal and not slow) and (test_causal_inference_by_groups_of_chunks or "
        "test_causal_inference_overwrites_only_its_own_buffers or test_causal_scan_and_loop_agree_and_are_exact "
        "or test_oprf_causal_a_is_fixed_within_a_forward_and_tracked_in_training)'",
    ],
    "fast_sq": [
        "tests/test_kind_oprf.py -k '(not_a_power or dense_rows) and "
        "((test_fast_couplings_unbiased_where_d_is_not_a_power_of_two or "
        "test_fast_projection_row_norms_and_oprf_features_match_the_dense_rows) and not (TestOprfMap or "
        "TestOprfTheory or TestOptimalA or TestOprfMse))'",
        "tests/test_montecarlo_features.py -k '(round_two) and ((test_round_two_inputs_are_refused_by_name) and "
        "not (TestFeatures))'",
        "tests/test_montecarlo_norm_coupling.py -k '(round_two) and ((test_round_two_api_findings) and not "
        "(TestNormCoupling))'",
        "tests/test_montecarlo_couplings.py -k '(fast_projection) and "
        "((test_fast_projection_is_refused_before_drawing) and not (TestCouplings))'",
    ],
    "oprf_stat": [
        "tests/test_nn_module.py -k '(a_star or ignores_padded or oprf_data_driven) and "
        "(test_oprf_a_star_keeps_its_relative_accuracy_at_every_scale or "
        "test_oprf_data_driven_a_ignores_padded_content or test_oprf_data_driven_a_is_a_constant_of_the_backward "
        "or test_oprf_statistic_ignores_padded_and_non_finite_rows)'",
        "tests/test_kind_oprf.py -k '(batch_pair or optimal_a) and "
        "((test_batch_pair_statistic_is_the_mean_over_unpadded_pairs or "
        "test_data_parameters_rule_is_the_optimal_a_on_every_backend or "
        "test_optimal_a_minimises_the_second_moment or test_pnc_optimal_a_at_small_v or "
        "test_pnc_optimal_a_golden_fallback_and_tiny_v or test_pnc_optimal_a_is_a_minimum) and not (TestOprfMap "
        "or TestOprfTheory or TestOptimalA or TestOprfMse))'",
    ],
    "mc_edges": [
        "tests/test_montecarlo_estimators.py -k '(outside_float64 or frobenius) and "
        "((test_exact_kernel_and_gram_estimate_are_loud_outside_float64 or "
        "test_gram_estimate_frobenius_error_and_its_budget) and not (TestEstimators))'",
        "tests/test_montecarlo_features.py -k '(round_two) and ((test_round_two_inputs_are_refused_by_name) and "
        "not (TestFeatures))'",
        "tests/test_montecarlo_norm_coupling.py -k '(round_two) and ((test_round_two_api_findings) and not "
        "(TestNormCoupling))'",
    ],
    "oprf_a": [
        "tests/test_kind_oprf.py -k '(optimal_a_minimises or data_parameters or bad_input or domain) and "
        "((test_bad_input or test_data_parameters_rule_is_the_optimal_a_on_every_backend or "
        "test_domain_tiny_huge_v_and_large_d or test_optimal_a_minimises_the_second_moment) and not (TestOprfMap "
        "or TestOprfTheory or TestOptimalA or TestOprfMse))'",
        "tests/test_kind_oprf.py -k '(optimal_a) and ((test_optimal_a_at_large_s_is_minus_s_over_4 or "
        "test_optimal_a_has_relative_accuracy_at_every_s) and not (TestOprfMap or TestOprfTheory or TestOptimalA "
        "or TestOprfMse))'",
    ],
    "oprf_var": [
        "tests/test_kind_oprf.py -k '(oprf) and ((test_oprf_published_cases or test_oprf_variance_at_large_v or "
        "test_oprf_variance_at_small_a) and not (TestOprfMap or TestOprfTheory or TestOptimalA or TestOprfMse))'",
        "tests/test_kind_oprf.py -k '(theorem_pair_term or certified or domain or bad_input) and ((test_bad_input"
        " or test_certified_mse_contains_the_value or test_domain_tiny_huge_v_and_large_d or "
        "test_theorem_pair_term_does_not_depend_on_a) and not (TestOprfMap or TestOprfTheory or TestOptimalA or "
        "TestOprfMse))'",
        "tests/test_kind_oprf.py -k '(iid_oprf_mse or theorem_couplings) and ((test_iid_oprf_mse_at_very_large_v "
        "or test_theorem_couplings_at_very_large_v_return_values) and not (TestOprfMap or TestOprfTheory or "
        "TestOptimalA or TestOprfMse))'",
        "tests/test_kind_oprf.py -k '(one_eighth or certified) and ((TestOprfTheory) and not (TestOprfMap or "
        "TestOptimalA or TestOprfMse))'",
    ],
    "dim_bits": [
        "tests/test_theory_distributions.py -k '(not pdf_wij and not z_crit) and ((test_chi_moment_at_huge_k or "
        "test_chi_moment_check_has_power or test_wij_moment_at_huge_d) and not (TestDimensionBits))'",
        "tests/test_theory_mse.py -k '(not pdf_wij and not z_crit) and ((test_closed_forms_at_a_4301_digit_d or "
        "test_huge_d_beyond_the_domain_is_loud or test_huge_d_prefactor_check_has_power or "
        "test_orthogonality_gap_at_huge_d or test_rff_asymptotic_ratio_at_huge_d or test_rff_v0_ratio_at_huge_d "
        "or test_simplex_v2_prefactor_and_v0_ratio_at_huge_d or test_simplex_v2_prefactor_any_m_at_huge_d) and "
        "not (TestKernelMse))'",
        "tests/test_theory_validation.py -k '(not pdf_wij and not z_crit) and "
        "(test_huge_integers_are_named_in_messages)'",
        "tests/test_theory_mse.py -k '(d_1e20) and ((test_simplex_ratio_at_d_1e20_keeps_every_digit) and not "
        "(TestKernelMse))'",
    ],
    "tiny_v_mse": TINY_V_TESTS,
    "tiny_v_e": TINY_V_TESTS,
    "mse_kinds": [
        "tests/test_theory_feature_kinds.py -k '(kernel_mse or mean_conformity) and "
        "((test_kernel_mse_of_the_named_forms or test_mean_conformity_of_every_kind_against_its_definition) and "
        "not (TestRegistry))'",
        "tests/test_kind_hyperbolic.py -k '(issue_numbers or single_direction or small_v or (monte_carlo and not "
        "pnc)) and ((test_monte_carlo_agrees_with_the_closed_form or "
        "test_single_direction_variance_is_a_fraction_of_the_prf_one or test_small_v_limit or "
        "test_the_issue_numbers) and not (TestHyperbolicMap or TestHyperbolicTheory))'",
        "tests/test_kind_oprf.py -k '(domain or bad_input or (monte_carlo and not pnc) or conformity_estimate) "
        "and ((test_bad_input or test_conformity_estimate_against_mean_conformity or "
        "test_domain_tiny_huge_v_and_large_d or test_monte_carlo_agrees_with_the_closed_form) and not "
        "(TestOprfMap or TestOprfTheory or TestOptimalA or TestOprfMse))'",
    ],
}
#: The tests added against the survivors of the "before" run (one more pytest run per target).
AFTER = {
    "couplings": [T + "test_montecarlo_couplings.py::TestCouplings"],
    "estimators": [T + "test_montecarlo_estimators.py::TestEstimators"],
    "features": [T + "test_montecarlo_features.py::TestFeatures"],
    "pnc": [T + "test_kind_pnc.py::TestPnc"],
    "norm_coupling": [T + "test_montecarlo_norm_coupling.py::TestNormCoupling"],
    "feature_kinds": [T + "test_theory_feature_kinds.py::TestRegistry"],
    "mc_hyperbolic": [T + "test_kind_hyperbolic.py::TestHyperbolicMap"],
    "mc_oprf": [T + "test_kind_oprf.py::TestOprfMap"],
    "th_hyperbolic": [T + "test_kind_hyperbolic.py::TestHyperbolicTheory"],
    "th_oprf": [T + "test_kind_oprf.py::TestOprfTheory"],
    "mse_kinds": [T + "test_theory_mse.py::TestKernelMse"],
    "fused_scans": [],
    "fused_products": [],
    "fused_launch": [],
    "fused_host": [],
    "nn_host": [],
    "nn_func": [],
    "fast_sq": [],
    "oprf_stat": [],
    "mc_edges": [],
    "oprf_a": [T + "test_kind_oprf.py::TestOptimalA"],
    "oprf_var": [T + "test_kind_oprf.py::TestOprfMse"],
    "dim_bits": [T + "test_theory_distributions.py::TestDimensionBits"],
    "tiny_v_mse": [],
    "tiny_v_e": [],
}

#: name -> (group, file, functions or None for the whole file)
TARGETS = {
    "couplings": ("montecarlo", "montecarlo/couplings.py", None),
    "estimators": ("montecarlo", "montecarlo/estimators.py", None),
    "features": ("montecarlo", "montecarlo/features.py", None),
    "pnc": ("montecarlo", "montecarlo/pnc.py", None),
    "norm_coupling": ("montecarlo", "montecarlo/norm_coupling.py", None),
    "feature_kinds": ("kinds", "theory/feature_kinds.py", None),
    "mc_hyperbolic": ("kinds", "montecarlo/hyperbolic.py", None),
    "mc_oprf": ("kinds", "montecarlo/oprf.py", None),
    "th_hyperbolic": ("kinds", "theory/hyperbolic.py", None),
    "th_oprf": ("kinds", "theory/oprf.py", None),
    "mse_kinds": ("kinds", "theory/mse.py", ("kernel_mse", "_kind_inner", "_kind_scaled", "mean_conformity")),
    # the fused causal scan's kernels over the chunks and of the ratio, and their launches (Triton's interpreter)
    "fused_scans": ("fused", "montecarlo/nn/_fused.py",
                    ("_scan_program", "_chunk_offsets_kernel", "_row_offsets_kernel", "_states_kernel",
                     "_states_adjoint_kernel", "_ratio_rows", "_ratio_kernel", "_ratio_grad_kernel",
                     "_chunk_offsets_impl", "_states", "_prefix_states", "_states_adjoint", "_ratio_launch",
                     "_seen_rows", "ratio")),
    # the kernels' products (the bfloat16 operands and the interpreter's rounding of them, also of the values'
    # gradient stored in bfloat16) and their sizes
    "fused_products": ("fused", "montecarlo/nn/_fused.py", ("_bf16_bits", "_bf16_rounded", "_mm", "products", "_sizes")),
    # the launch cache (the compiled kernels' runners) and the features' kernels' products and sizes
    "fused_launch": ("fused", "montecarlo/nn/_fused.py", ("_arg_key", "_launch_key", "_launch", "_launch_cache_off",
                                                       "feature_products", "_feature_meta")),
    # the host's work of an eager step (the features' rows kept, the leading shapes written directly, the grids
    # kept) and the values' layout without a ones column (the kernels' loads and stores of values)
    "fused_host": ("fused", "montecarlo/nn/_fused.py", ("feature_rows", "scaled_log_features", "_grids", "_grids_of",
                                                     "_linear_features_impl", "_linear_features_backward_impl",
                                                     "_cols", "_values", "_store_cols", "_store_value_grads")),
    "nn_host": ("fused", "montecarlo/nn/_module.py", ("_kernel_rows",)),
    "nn_host_dispatch": ("fused", "montecarlo/nn/_dispatch.py", ("_as_rows",)),
    "nn_host_ops": ("fused", "montecarlo/nn/_ops.py", ("_broadcast_shapes",)),
    # torch.func and torch.export: the forward-mode rules, the Functions' contexts, the switches that pick them;
    # deferred initialisation (the meta device, reset_parameters)
    "nn_func": ("fused", "montecarlo/nn/_ops.py", ("jvp", "setup_context", "_with_jvp")),
    "nn_func_scan": ("fused", "montecarlo/nn/_scan.py", ("jvp", "setup_context")),
    "nn_func_probes": ("fused", "montecarlo/nn/_probes.py", ("_transformed", "_no_autocast", "_autocast_on",
                                                              "_exporting")),
    "nn_func_module": ("fused", "montecarlo/nn/_module.py", ("_rho", "reset_parameters")),
    "nn_func_features": ("fused", "montecarlo/nn/_features.py", ("draw_projections",)),
    # the second exploration run's fixes (2026-11-27): the fast couplings' row norms cut to d of p columns, the
    # input checks of the HD-product and Algorithm 1; FAVOR++'s A* on both sides of s = 1/2 and its statistic
    # over the unpadded finite rows; exact_kernel's and the features' float64 range
    "fast_sq": ("hardening", "montecarlo/couplings.py", ("_fast_sq_norms", "row_sq_norms", "_array_ns",
                                                          "_fast_structured")),
    "oprf_stat": ("hardening", "montecarlo/oprf.py", ("_a_star", "_row_moments")),
    "mc_edges": ("hardening", "montecarlo/estimators.py", ("exact_kernel", "gram_estimate")),
    # the OPRF (FAVOR++) closed forms of theory/oprf.py: the optimal A (and the A=None dispatch), the pieces of the
    # OPRF kernel MSE (A's check, E[b^2] and the variance's exponent, the v -> 0 values, the pair excess's dispatch,
    # the certified ball); and the guard bits of an integer dimension (theory.distributions.dimension_bits)
    "oprf_a": ("oprf_theory", "theory/oprf.py", ("optimal_a", "_optimal_a", "_parameters")),
    "oprf_var": ("oprf_theory", "theory/oprf.py", ("check_a", "_log_excess_moment", "_exponent", "_variance",
                                                   "second_moment", "_small_v", "_pair_excess", "certified_mse",
                                                   "_arb_real")),
    "dim_bits": ("oprf_theory", "theory/distributions.py", ("dimension_bits",)),
    # the pair excess at tiny v: its Taylor terms and remainder bound, the cap on extra bits, the v^4 coefficient
    "tiny_v_mse": ("tiny_v", "theory/mse.py", ("_series_excess", "_excess", "_small_arg_bits")),
    "tiny_v_e": ("tiny_v", "theory/conformities.py", ("coupling_conformity_v4_excess",)),
}
# (montecarlo.nn is a package: its targets of one concern span files, one target per file, the same commands)
for _name in ("nn_host_dispatch", "nn_host_ops"):
    BEFORE[_name], AFTER[_name] = BEFORE["nn_host"], AFTER["nn_host"]
for _name in ("nn_func_scan", "nn_func_probes", "nn_func_module", "nn_func_features"):
    BEFORE[_name], AFTER[_name] = BEFORE["nn_func"], AFTER["nn_func"]
GROUPS = ("montecarlo", "kinds", "fused", "hardening", "oprf_theory", "tiny_v")


def load_mutate(path=MUTATE):
    """The shared tool as a module (its ``sites`` and ``mutate``)."""
    if not path.exists():
        raise SystemExit(f"error: {path} not found (the shared mutation tool; this runner uses its operators)")
    spec = importlib.util.spec_from_file_location("mutate_tool", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def command(name, tests):
    """The test command of a target: ``before`` (existing tests) or ``after`` (plus the mutation tests)."""
    parts = BEFORE[name] + (AFTER[name] if tests == "after" else [])
    return " && ".join(f"{PYTEST} {p}" for p in parts)


def _line_ranges(tree, functions):
    spans = [(n.lineno, n.end_lineno) for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in functions]
    found = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = set(functions) - found
    if missing:
        raise SystemExit(f"error: functions {sorted(missing)} not found")
    return spans


def target_sites(tool, name, root=ROOT):
    """Indices (into ``tool.sites``' walk order) of the mutation sites of a target."""
    _, path, functions = TARGETS[name]
    tree = ast.parse((root / path).read_text())
    spans = _line_ranges(tree, functions) if functions else None
    out = []
    for i, (_, node) in enumerate(tool.sites(tree)):
        if spans is None or any(lo <= node.lineno <= hi for lo, hi in spans):
            out.append(i)
    return out


def describe_mutant(tool, src, index):
    """(kind, line, expression before, after, mutated source): ``tool.mutate`` plus the edited expression."""
    tree = ast.parse(src)
    for i, (kind, node) in enumerate(tool.sites(tree)):
        if i == index:
            before = ast.unparse(node)
            break
    else:
        raise IndexError(index)
    kind2, line, new = tool.mutate(src, index)
    tree2 = ast.parse(new)
    for i, (_, node) in enumerate(tool.sites(tree2)):
        if i == index:
            after = ast.unparse(node)
            break
    else:  # the mutation removed a site (e.g. -x -> +x)
        after = "?"
    if kind == "neg":
        after = "+" + before[1:] if before.startswith("-") else after
    return kind2, line, before, after, new


def _run(cmd, cwd, timeout):
    t0 = time.time()
    try:
        code, out = run_group(cmd, timeout, shell=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(cwd)})
        status = "killed" if code != 0 else "survived"
        tail = out.strip().splitlines()[-1:] if code else []
    except subprocess.TimeoutExpired:  # the whole process group was killed (pytest's workers too)
        status, tail = "timeout", []
    return status, time.time() - t0, tail


def _write_atomic(path, text):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Sampled formula-mutation score of a group of targets, each mutant "
                                 "run against its own target's test command (operators of ../shared/tools/mutate.py).")
    ap.add_argument("--group", choices=GROUPS, help="one of " + ", ".join(GROUPS))
    ap.add_argument("--target", choices=tuple(TARGETS),
                    help="sample this target's sites only (its group implied), e.g. to cover all of a small one")
    ap.add_argument("--sample", type=int, default=80, help="mutants drawn from the group's sites (default 80)")
    ap.add_argument("--seed", type=int, default=22, help="seed of the sample (default 22)")
    ap.add_argument("--tests", choices=("before", "after"), default="after",
                    help="existing tests only, or with the mutation tests' classes (default after)")
    ap.add_argument("--timeout", type=int, default=60,
                    help="seconds per mutant before it counts as a timeout: at least this, and 4 times the unmutated "
                         "run of the target's command (default 60)")
    ap.add_argument("--json", help="write the per-mutant results here (atomically)")
    ap.add_argument("--only", nargs="+", metavar="FILE:LINE:KIND",
                    help="re-run just these mutants of the sample (as printed), e.g. to check a new test")
    ap.add_argument("--sources", metavar="DIR",
                    help="take the target files from DIR (same relative paths, e.g. a copy made for an earlier run) "
                         "instead of the checkout, so that a later run samples the same mutants")
    ap.add_argument("--list", action="store_true", help="print targets, site counts and commands, then exit")
    a = ap.parse_args(argv)
    tool = load_mutate()
    if a.list:
        for name, (group, path, fns) in TARGETS.items():
            n = len(target_sites(tool, name, ROOT if a.sources is None else Path(a.sources)))
            print(f"{group:11} {name:14} {path}{' (' + ', '.join(fns) + ')' if fns else ''}: {n} sites\n"
                  f"    {command(name, a.tests)}")
        return 0
    if a.target is not None:
        if a.group not in (None, TARGETS[a.target][0]):
            ap.error(f"--target {a.target} is in group {TARGETS[a.target][0]!r}, not {a.group!r}")
        a.group = TARGETS[a.target][0]
    if a.group is None:
        ap.error("--group is required (or --target, or --list)")
    if a.sample < 1:
        ap.error(f"--sample must be >= 1, got {a.sample}")
    names = [a.target] if a.target else [n for n, t in TARGETS.items() if t[0] == a.group]
    src_root = ROOT if a.sources is None else Path(a.sources)
    for n in names:
        if not (src_root / TARGETS[n][1]).is_file():
            raise SystemExit(f"error: --sources {a.sources}: {TARGETS[n][1]} not found")
    digests = {TARGETS[n][1]: hashlib.sha256((src_root / TARGETS[n][1]).read_bytes()).hexdigest()[:16] for n in names}
    pool = [(n, i) for n in names for i in target_sites(tool, n, src_root)]
    rng = random.Random(a.seed)
    chosen = rng.sample(pool, min(a.sample, len(pool)))
    where = f"target {a.target!r}" if a.target else f"group {a.group!r}"
    print(f"{len(pool)} mutation sites in {where}; running {len(chosen)} (seed {a.seed}, tests {a.tests})",
          flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "proj"
        shutil.copytree(ROOT, work, symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "simplex_rf_figures"))
        (Path(tmp) / "shared").symlink_to(ROOT.parent / "shared")
        for n in names:  # the sampled sources (the checkout's own unless --sources)
            shutil.copyfile(src_root / TARGETS[n][1], work / TARGETS[n][1])
        limits = {}
        for name in sorted({n for n, _ in chosen}):
            status, secs, tail = _run(command(name, a.tests), work, a.timeout * 5)
            if status != "survived":
                print(f"error: the unmutated checkout fails the command of {name!r} ({status}, {secs:.0f} s): "
                      f"{' '.join(tail)}\n    {command(name, a.tests)}", file=sys.stderr)
                return 2
            limits[name] = max(a.timeout, int(4 * secs))
            print(f"baseline {name}: passes in {secs:.0f} s (mutant timeout {limits[name]} s)", flush=True)
        for k, (name, index) in enumerate(chosen, 1):
            path = TARGETS[name][1]
            orig = (work / path).read_text()
            kind, line, before, after, new = describe_mutant(tool, orig, index)
            tag = f"{path}:{line}:{kind}"
            if a.only and tag not in a.only:
                continue
            (work / path).write_text(new)
            try:
                status, secs, tail = _run(command(name, a.tests), work, limits[name])
            finally:
                (work / path).write_text(orig)
            results.append({"target": name, "file": path, "line": line, "kind": kind, "index": index,
                            "before": before, "after": after, "status": status, "seconds": round(secs, 1)})
            print(f"[{k}/{len(chosen)}] {status.upper() if status == 'survived' else status:8} {tag} "
                  f"`{before}` -> `{after}` ({secs:.0f} s)", flush=True)
    counts = {s: sum(r["status"] == s for r in results) for s in ("killed", "timeout", "survived")}
    total = len(results)
    for r in results:
        if r["status"] == "survived":
            print(f"survivor: {r['file']}:{r['line']} {r['kind']} `{r['before']}` -> `{r['after']}`")
    print(f"{where} (seed {a.seed}, tests {a.tests}): {total} mutants, killed {counts['killed']}, "
          f"timeout {counts['timeout']}, survived {counts['survived']}; kill rate "
          f"{(counts['killed'] + counts['timeout']) / max(total, 1):.0%}")
    if a.json:
        _write_atomic(a.json, json.dumps({"group": a.group, "target": a.target, "seed": a.seed, "sample": a.sample,
                                          "tests": a.tests, "sha256": digests, "counts": counts, "mutants": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
