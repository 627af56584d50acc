//! placeholder until the owning work lands
