"""Property-based fuzz tests (hypothesis): the line reader, the extractors through a whole
diagnosis, blame from job output, job records, and memory on many distinct lines.

The default run is short; ``ATTRIBUTION_FUZZ_EXAMPLES=5000`` makes it long (docs/fuzzing.md).
"""
