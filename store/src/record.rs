//! What the stores write: privacy units, costs and noise modes as stable text and bytes,
//! the records of charges, keys and leases, and the key check value.
//!
//! **Guarantee.** Every encoding here is exact and checked on the way back: a cost is
//! stored as the bit patterns of its `f64`s (so a retried charge is compared bit for bit
//! with the recorded one), and a record that does not decode to what this module writes is
//! refused ([`StoreError::Corrupt`]), never guessed at. Ledgers themselves are stored as
//! the core's [`Ledger::encode`] bytes: the composition that decides a charge is the
//! core's, not a re-implementation. No master key is written by this module; the key check
//! value ([`key_check_value`]) is a pseudorandom function of the key that reveals nothing
//! about any noise (module docs of [`key_check_value`]).

use dpattn_core::accounting::cost::Cost;
use dpattn_core::accounting::ledger::Ledger;
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::sampling::NoiseKey;
use dpattn_core::session::epoch_key;
use dpattn_core::{Epsilon, NoiseMode, PrivacyBudget};

use crate::error::{Result, StoreError};

/// Longest owner id, key id or charge id, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// Checks an owner, key or charge id: 1 to [`MAX_ID_LEN`] bytes, no NUL.
pub(crate) fn check_id(id: &str, what: &'static str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_ID_LEN || id.contains('\0') {
        return Err(StoreError::Invalid { what });
    }
    Ok(())
}

/// The stable text of a privacy unit (`tokens:1`, `feature-column`, `sequence`, `prompt`,
/// `record`), the second half of a ledger's key.
pub fn unit_text(unit: PrivacyUnit) -> String {
    match unit {
        PrivacyUnit::Tokens(c) => format!("tokens:{c}"),
        PrivacyUnit::FeatureColumn => "feature-column".into(),
        PrivacyUnit::Sequence => "sequence".into(),
        PrivacyUnit::Prompt => "prompt".into(),
        PrivacyUnit::Record => "record".into(),
    }
}

/// The unit of [`unit_text`].
pub(crate) fn parse_unit(text: &str) -> Result<PrivacyUnit> {
    let bad = || StoreError::Corrupt { what: format!("unknown privacy unit {text:?}") };
    match text {
        "feature-column" => Ok(PrivacyUnit::FeatureColumn),
        "sequence" => Ok(PrivacyUnit::Sequence),
        "prompt" => Ok(PrivacyUnit::Prompt),
        "record" => Ok(PrivacyUnit::Record),
        t => {
            let c = t.strip_prefix("tokens:").ok_or_else(bad)?;
            let c: u32 = c.parse().map_err(|_| bad())?;
            PrivacyUnit::tokens(c).map_err(|_| bad())
        }
    }
}

/// `exact`, `unsafe-float` or `constant-time` ([`NoiseMode::name`]).
pub(crate) fn mode_text(mode: NoiseMode) -> &'static str {
    mode.name()
}

pub(crate) fn parse_mode(text: &str) -> Result<NoiseMode> {
    match text {
        "exact" => Ok(NoiseMode::Exact),
        "unsafe-float" => Ok(NoiseMode::UnsafeFloat),
        "constant-time" => Ok(NoiseMode::ConstantTime),
        t => Err(StoreError::Corrupt { what: format!("unknown noise mode {t:?}") }),
    }
}

/// Bytes of an encoded [`Cost`]: a tag, three `f64` and one `u64` (little-endian).
pub const COST_LEN: usize = 1 + 8 * 4;

/// The exact bytes of a cost: equal bytes ⇔ equal costs, `f64`s compared by bit pattern.
pub fn encode_cost(cost: &Cost) -> [u8; COST_LEN] {
    let (tag, a, b, c, d) = match *cost {
        Cost::Nothing => (0u8, 0.0, 0.0, 0.0, 0u64),
        Cost::Approx(p) => (1, p.epsilon().get(), p.delta().get(), 0.0, 0),
        Cost::Pure(e) => (2, e.get(), 0.0, 0.0, 0),
        Cost::Gaussian { approx: None, rho } => (3, 0.0, 0.0, rho, 0),
        Cost::Gaussian { approx: Some(p), rho } => (4, p.epsilon().get(), p.delta().get(), rho, 0),
        Cost::SubsampledGaussian { rate, noise_multiplier, steps } => {
            (5, rate, noise_multiplier, 0.0, steps)
        }
    };
    let mut out = [0u8; COST_LEN];
    out[0] = tag;
    out[1..9].copy_from_slice(&a.to_le_bytes());
    out[9..17].copy_from_slice(&b.to_le_bytes());
    out[17..25].copy_from_slice(&c.to_le_bytes());
    out[25..33].copy_from_slice(&d.to_le_bytes());
    out
}

/// The cost of [`encode_cost`]'s bytes.
pub(crate) fn decode_cost(bytes: &[u8]) -> Result<Cost> {
    let bad = |what: &str| StoreError::Corrupt { what: format!("stored cost: {what}") };
    if bytes.len() != COST_LEN {
        return Err(bad("wrong length"));
    }
    let f = |i: usize| f64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    let (a, b, c) = (f(1), f(9), f(17));
    let d = u64::from_le_bytes(bytes[25..33].try_into().expect("8 bytes"));
    let budget = |e, d| PrivacyBudget::new(e, d).map_err(|_| bad("invalid (epsilon, delta)"));
    let cost = match bytes[0] {
        0 => Cost::Nothing,
        1 => Cost::Approx(budget(a, b)?),
        2 => Cost::Pure(Epsilon::new(a).map_err(|_| bad("invalid epsilon"))?),
        3 => Cost::Gaussian { approx: None, rho: c },
        4 => Cost::Gaussian { approx: Some(budget(a, b)?), rho: c },
        5 => Cost::SubsampledGaussian { rate: a, noise_multiplier: b, steps: d },
        _ => return Err(bad("unknown tag")),
    };
    // The round trip must be exact: anything else was not written by `encode_cost`.
    if encode_cost(&cost)[..] != *bytes {
        return Err(bad("not in the canonical encoding"));
    }
    Ok(cost)
}

/// A ledger's bytes ([`Ledger::encode`]).
pub(crate) fn encode_ledger(ledger: &Ledger) -> Vec<u8> {
    let mut out = vec![0u8; <Ledger>::ENCODED_LEN];
    ledger.encode(&mut out).expect("the buffer has ENCODED_LEN bytes");
    out
}

/// The ledger of [`encode_ledger`]'s bytes.
pub(crate) fn decode_ledger(bytes: &[u8]) -> Result<Ledger> {
    if bytes.len() != <Ledger>::ENCODED_LEN {
        return Err(StoreError::Corrupt { what: "a stored ledger has the wrong length".into() });
    }
    Ledger::decode(bytes)
        .map_err(|e| StoreError::Corrupt { what: format!("a stored ledger does not decode: {e}") })
}

/// The key check value of `master` at `epoch`: the first 16 bytes of
/// `epoch_key(epoch_key(master, epoch), 0)`.
///
/// A store keeps it (never the key, unless asked) to refuse a process that opens a key id
/// with another master key. It is safe to store: `epoch_key(k, 0)` is the ChaCha20 block of
/// `k` on stream `2⁶⁴ − 1`, which no session ever draws noise from (it derives epoch keys),
/// so the value is a pseudorandom function of the epoch key on an input no release uses,
/// and says nothing about any noise.
///
/// ```
/// use dpattn_core::sampling::NoiseKey;
/// use dpattn_store::record::key_check_value;
/// let key = NoiseKey::for_replay([7; 32]);
/// assert_eq!(key_check_value(&key, 3), key_check_value(&key, 3));
/// assert_ne!(key_check_value(&key, 3), key_check_value(&key, 4));
/// assert_ne!(key_check_value(&key, 3), key_check_value(&NoiseKey::for_replay([8; 32]), 3));
/// ```
pub fn key_check_value(master: &NoiseKey, epoch: u64) -> [u8; 16] {
    let derived = epoch_key(&epoch_key(master, epoch), 0);
    let mut out = [0u8; 16];
    out.copy_from_slice(&derived.expose_bytes()[..16]);
    out
}

/// Where a release's noise comes from: the key id (its master key and epoch) and the
/// consecutive stream ids `stream .. stream + streams`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawRecord {
    /// The key id the stream ids were leased under.
    pub key_id: String,
    /// The key id's epoch (public; with the master key it gives the epoch key).
    pub epoch: u64,
    /// The first stream id.
    pub stream: u64,
    /// How many consecutive stream ids.
    pub streams: u64,
}

/// One recorded charge: the `part`-th charge of the release named `charge_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChargeRecord {
    /// The caller's charge id.
    pub charge_id: String,
    /// Which charge of the release (a release that charges twice records parts 0 and 1).
    pub part: u32,
    /// The position of the charge in the ledger's log (0, 1, 2, …, without gaps).
    pub ordinal: u64,
    /// The privacy unit the release protects.
    pub unit: PrivacyUnit,
    /// The cost as the mechanism stated it.
    pub cost: Cost,
    /// The noise mode of the release.
    pub mode: NoiseMode,
    /// The release's noise.
    pub draw: DrawRecord,
}

/// A charge to record: see [`BudgetStore::charge`](crate::BudgetStore::charge).
#[derive(Debug, Clone, Copy)]
pub struct ChargeRequest<'a> {
    /// The ledger's owner id.
    pub owner: &'a str,
    /// The ledger's unit (with `owner`, the ledger's key).
    pub ledger_unit: PrivacyUnit,
    /// The caller's charge id (idempotency key of one release).
    pub charge_id: &'a str,
    /// Which charge of the release.
    pub part: u32,
    /// The unit the release protects.
    pub unit: PrivacyUnit,
    /// Its cost.
    pub cost: &'a Cost,
    /// Its noise mode.
    pub mode: NoiseMode,
    /// Its noise.
    pub draw: &'a DrawRecord,
}

/// What [`BudgetStore::charge`](crate::BudgetStore::charge) did.
#[derive(Debug, Clone, PartialEq)]
pub enum ChargeOutcome {
    /// The charge was new and is now recorded; the ledger after it.
    Charged(Ledger),
    /// The same charge (same id, part, unit, cost, mode and draw) was already recorded:
    /// nothing was charged again; the stored ledger.
    AlreadyCharged(Ledger),
}

impl ChargeOutcome {
    /// The ledger after the call.
    pub fn ledger(&self) -> &Ledger {
        match self {
            ChargeOutcome::Charged(l) | ChargeOutcome::AlreadyCharged(l) => l,
        }
    }
}

/// How a session gets its master key.
#[derive(Debug, Clone, Copy)]
pub enum KeyRequest<'a> {
    /// The caller holds the master key (from its own key store): the store records only the
    /// key id's epoch and key check value, never the key. The default, and the only way for
    /// a fleet whose database administrators must not see keys.
    Caller(&'a NoiseKey),
    /// The store keeps the master key: generated from the operating system the first time
    /// the key id is opened, read back afterwards. **The database is then as sensitive as
    /// the data** (whoever reads the key can subtract the noise of every release).
    InStore,
}

/// A registered key id.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRecord {
    /// The key id.
    pub key_id: String,
    /// Its epoch, drawn from the operating system when the key id was registered.
    pub epoch: u64,
    /// [`key_check_value`] of the master key at `epoch`.
    pub check_value: [u8; 16],
    /// The master key, only when it was registered with [`KeyRequest::InStore`].
    pub stored_key: Option<NoiseKey>,
    /// The first stream id not yet leased.
    pub next_stream: u64,
}

/// A range of stream ids leased to one holder: `first .. first + count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The key id.
    pub key_id: String,
    /// The first stream id.
    pub first: u64,
    /// How many.
    pub count: u64,
    /// Who leased it (a random id per session, for audit).
    pub holder: String,
}

/// A fresh random `u64` from the operating system.
pub(crate) fn os_u64() -> Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|_| StoreError::Invalid {
        what: "the operating system's random number generator failed",
    })?;
    Ok(u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpattn_core::accounting::privacy_unit::PrivacyUnit as U;

    #[test]
    fn units_modes_and_costs_round_trip_exactly_and_foreign_bytes_are_refused() {
        for u in
            [U::TOKEN, U::tokens(7).unwrap(), U::FeatureColumn, U::Sequence, U::Prompt, U::Record]
        {
            assert_eq!(parse_unit(&unit_text(u)).unwrap(), u);
        }
        for t in ["tokens:0", "tokens:", "token", ""] {
            assert!(parse_unit(t).is_err(), "{t}");
        }
        for m in [NoiseMode::Exact, NoiseMode::UnsafeFloat] {
            assert_eq!(parse_mode(mode_text(m)).unwrap(), m);
        }
        let b = PrivacyBudget::new(0.125, 1e-7).unwrap();
        let costs = [
            Cost::Nothing,
            Cost::Approx(b),
            Cost::Pure(Epsilon::new(0.5).unwrap()),
            Cost::Gaussian { approx: None, rho: 0.01 },
            Cost::Gaussian { approx: Some(b), rho: 0.02 },
            Cost::SubsampledGaussian { rate: 0.01, noise_multiplier: 1.1, steps: 77 },
        ];
        for c in costs {
            assert_eq!(decode_cost(&encode_cost(&c)).unwrap(), c);
        }
        // One ulp apart is another cost.
        let near =
            Cost::Approx(PrivacyBudget::new(f64::from_bits(0.125f64.to_bits() + 1), 1e-7).unwrap());
        assert_ne!(encode_cost(&near), encode_cost(&costs[1]));
        let mut bad = encode_cost(&costs[1]);
        bad[0] = 9;
        assert!(decode_cost(&bad).is_err());
        let mut padded = encode_cost(&Cost::Nothing);
        padded[5] = 1; // a Nothing with a stray field is not canonical
        assert!(decode_cost(&padded).is_err());
        assert!(decode_cost(&[0u8; 3]).is_err());
    }
}
