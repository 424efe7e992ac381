//! Connecting to the realtime server, or the simulated model.
