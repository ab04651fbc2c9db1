"""Detection: catalog patterns, the multi-pattern matcher, and crash/hang/straggler detectors."""
