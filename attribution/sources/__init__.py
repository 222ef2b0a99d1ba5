"""Log sources: which file feeds which stream, and reading each source into ``LogLine``s.

A *source* is one stream of one node (or of the job) and may span several files
(rotations). Each module does one job:

- ``streams``: which stream a file feeds, by its name; which streams are time-ordered.
- ``specs``: what to read (``SourceSpec``) and how (``ReadContext``, line selectors).
- ``reader``: opening a file safely (plain, gzip, zstd, UTF-16) and decoding a line.
- ``blocks``: reading a file in large blocks, picking the lines to parse; NUL runs and
  over-long lines.
- ``window``: reading a time-ordered log by the job window (rotations outside it skipped,
  bisection to its start, stopping past its end).
- ``clock``: line times: stamps at a spot of a file, kernel uptime through the boot time,
  a clock stepped back.
- ``prefix``: peeling a line's prefixes (time, host, rank, pid, device).
- ``textlog``: ``SourceReader``, one source of text files into lines and a coverage entry.
- ``journal``: ``JournalReader``, systemd journal files through ``journalctl``.
- ``coverage``: what both readers share for the coverage entry (``Span``, ``MAX_NOTES``).
- ``lastoutput``: when each job output file last said something (``OutputSilence``).
- ``readahead``: ``read_sources``, many sources as one stream of lines, read ahead in threads.
"""
