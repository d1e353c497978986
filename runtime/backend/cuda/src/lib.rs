//! sluice's cuda backend (being written).
