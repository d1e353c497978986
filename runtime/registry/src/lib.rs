//! sluice's registry (being written).
