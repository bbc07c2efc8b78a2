"""A job's files into the store, exactly once: readers, the persister, kinds of files, syncs."""
