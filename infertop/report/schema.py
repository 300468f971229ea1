"""The report document's version and limits, declared once for every kind of report
(recordings, traces, rank directories): docs/report.md. Imports nothing, so a trace's report
does not load the recording report's modules to learn them."""

#: 2: stages[].share is the wall share, cpu_share version 1's share
REPORT_VERSION = 2
TOP_OPS = 50  # the ops listed in a report
