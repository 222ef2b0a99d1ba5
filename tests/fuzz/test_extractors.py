"""The extractors through a whole diagnosis: a tiny bundle whose job output, node logs and
slurmctld log hold lines of real formats, mutated. No exception escapes, each diagnosis ends
in bounded time, and its verdict serialises and renders."""

from __future__ import annotations

from hypothesis import given

from attribution.rules.compiled import RuleSet

from .properties import FUZZ, BundleCase, check_diagnosis, diagnosis_bundles


def test_mutated_lines_never_break_a_diagnosis(ruleset: RuleSet) -> None:
    @FUZZ
    @given(diagnosis_bundles())
    def run(case: BundleCase) -> None:
        check_diagnosis(case, ruleset)

    run()
