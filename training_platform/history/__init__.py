"""Reading what is stored: record and anomaly queries, spike-keeping downsampling, playback."""
