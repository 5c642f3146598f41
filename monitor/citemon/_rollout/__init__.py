"""Did a deploy get worse: per-version citation quality compared with its statistics
(``citemon compare``; the deploy canary's gate)."""
