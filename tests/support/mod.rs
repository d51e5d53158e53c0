//! Shared helpers of the integration tests. Each test binary uses a subset.

#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod problem;
pub mod stats;
