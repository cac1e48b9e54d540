"""The store's layout of runs: the codec, checkpoint records, run info and markers, rebuild,
retention."""
