//! sluice's cpu backend (being written).
