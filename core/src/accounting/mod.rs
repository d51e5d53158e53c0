//! Privacy accounting: composition, Rényi DP, zCDP, and the budget ledger.

pub mod composition;
pub mod ledger;
pub mod rdp;
pub mod zcdp;
