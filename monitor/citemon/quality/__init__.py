"""Is the judge right, and did a deploy get worse: calibration against human labels, the shuffle
canary (offline selftest and online), deploy comparison, and inspecting failing claims.
"""
