//! Deterministic discrete-event simulator (TEMP skeleton).
