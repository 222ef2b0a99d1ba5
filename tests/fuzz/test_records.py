"""Job records of random JSON: read, or refused with the documented one-line ``BundleError``
(docs/bundles.md, "job.json"); nothing else escapes, and a record that is read diagnoses."""

from __future__ import annotations

from hypothesis import given

from attribution.rules.compiled import RuleSet

from .properties import FUZZ, BundleCase, check_record, job_records


def test_a_job_record_is_read_or_refused_in_one_line(ruleset: RuleSet) -> None:
    @FUZZ
    @given(job_records())
    def run(case: BundleCase) -> None:
        check_record(case, ruleset)

    run()
