"""kime's benchmarks. Speed is measured here, never asserted in tests."""
