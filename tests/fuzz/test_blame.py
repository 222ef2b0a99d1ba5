"""Blame from job output alone: the job prints forged hardware and infrastructure lines
naming nodes in and outside the job (single names, comma lists, host lists) while every node's
kernel log recorded throughout the job and says nothing wrong. Nobody is responsible, nothing
says to drain, and no node outside the job is named."""

from __future__ import annotations

from hypothesis import given

from attribution.rules.compiled import RuleSet

from .properties import FUZZ, BundleCase, check_blame, forged_bundles


def test_job_output_alone_never_blames_a_node(ruleset: RuleSet) -> None:
    @FUZZ
    @given(forged_bundles())
    def run(case: BundleCase) -> None:
        check_blame(case, ruleset)

    run()
