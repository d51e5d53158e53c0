//! Privacy accounting: composition, Rényi DP, zCDP, and the budget ledger.

pub mod composition;
pub mod cost;
pub mod ledger;
pub mod privacy_unit;
pub mod rdp;
pub mod zcdp;
