//! The decisions every backend makes inside its transaction, written once: whether a charge
//! is new, a retry, or a conflict, and whether the ledger accepts it; whether a reopened
//! budget is the stored one; and the audit that replays a ledger's charge log.
//!
//! **Guarantee.** A backend calls [`decide_charge`] with the ledger and the charge row it
//! read *under the transaction's lock*, and writes what it returns in the same transaction.
//! The budget decision is the core's [`Accountant::charge`] on the decoded [`Ledger`]
//! (its composition, units, orders and rounding), never a re-implementation; so the stored
//! ledger after any sequence of committed charges is exactly what an in-memory ledger
//! charged with the same costs in the same order holds ([`audit`] checks this). A retry —
//! the same charge id and part with the same unit, cost, mode and draw — changes nothing;
//! the same id with anything different is refused.

use dpattn_core::accounting::cost::Accountant;
use dpattn_core::accounting::ledger::Ledger;
use dpattn_core::accounting::privacy_unit::PrivacyUnit;

use dpattn_core::sampling::NoiseKey;

use crate::BudgetStore;
use crate::error::{Result, StoreError};
use crate::record::{
    ChargeRecord, ChargeRequest, KeyRecord, KeyRequest, Lease, encode_cost, key_check_value, os_u64,
};

/// What a backend does with a charge.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Write this ledger and a new charge row in the same transaction.
    Charge(Box<Ledger>),
    /// A retry of a recorded charge: write nothing.
    Already,
}

/// Decides a charge (module docs). `existing` is the row recorded under the request's
/// charge id and part, if any.
///
/// # Errors
/// [`StoreError::ChargeIdConflict`] for the same id with anything different;
/// [`StoreError::Refused`] with the core's error when the ledger refuses.
pub fn decide_charge(
    current: &Ledger,
    existing: Option<&ChargeRecord>,
    req: &ChargeRequest<'_>,
) -> Result<Decision> {
    if let Some(rec) = existing {
        let conflict =
            |what| Err(StoreError::ChargeIdConflict { charge_id: req.charge_id.to_owned(), what });
        if encode_cost(&rec.cost) != encode_cost(req.cost) {
            return conflict("another cost");
        }
        if rec.unit != req.unit {
            return conflict("another privacy unit");
        }
        if rec.mode != req.mode {
            return conflict("another noise mode");
        }
        if rec.draw != *req.draw {
            // Two releases under one id with different noise would be two releases charged
            // once: the second is refused.
            return conflict("other stream ids (another release under the same charge id)");
        }
        return Ok(Decision::Already);
    }
    let mut next = current.clone();
    next.charge(req.unit, req.cost, req.mode)?;
    Ok(Decision::Charge(Box::new(next)))
}

/// Whether `stored` is the ledger `budget` asks for: the same unit, kind, total and (for an
/// RDP ledger) orders. What has been spent may differ — the stored spending stands.
///
/// # Errors
/// [`StoreError::BudgetMismatch`] otherwise.
pub fn check_budget(owner: &str, stored: &Ledger, budget: &Ledger) -> Result<()> {
    let same = stored.unit() == budget.unit()
        && stored.total() == budget.total()
        && stored.rdp_curve().map(|c| *c.orders()) == budget.rdp_curve().map(|c| *c.orders());
    if same { Ok(()) } else { Err(StoreError::BudgetMismatch { owner: owner.to_owned() }) }
}

/// A new key id's record for `key`: a fresh epoch from the operating system, the key check
/// value, and the master key itself only for [`KeyRequest::InStore`] (generated here).
///
/// # Errors
/// [`StoreError::Invalid`] if the operating system's generator fails.
pub fn new_key_record(key_id: &str, key: KeyRequest<'_>) -> Result<KeyRecord> {
    let epoch = os_u64()?;
    let (master, stored_key) = match key {
        KeyRequest::Caller(k) => (k.clone(), None),
        KeyRequest::InStore => {
            let k = NoiseKey::generate().map_err(|_| StoreError::Invalid {
                what: "the operating system's random number generator failed",
            })?;
            (k.clone(), Some(k))
        }
    };
    Ok(KeyRecord {
        key_id: key_id.to_owned(),
        epoch,
        check_value: key_check_value(&master, epoch),
        stored_key,
        next_stream: 0,
    })
}

/// Checks a request for a registered key id: a caller's key must have the registered key
/// check value; [`KeyRequest::InStore`] needs a stored key (whose check value must match).
///
/// # Errors
/// [`StoreError::KeyMismatch`]; [`StoreError::Corrupt`] for a stored key that does not
/// match its own check value.
pub fn check_key(record: &KeyRecord, key: KeyRequest<'_>) -> Result<()> {
    let mismatch = |what| Err(StoreError::KeyMismatch { key_id: record.key_id.clone(), what });
    if let Some(stored) = &record.stored_key
        && key_check_value(stored, record.epoch) != record.check_value
    {
        return Err(StoreError::Corrupt {
            what: format!("the stored key of key id {:?} fails its check value", record.key_id),
        });
    }
    match key {
        KeyRequest::Caller(k) if key_check_value(k, record.epoch) != record.check_value => {
            mismatch("registered with another master key (its key check value differs)")
        }
        KeyRequest::InStore if record.stored_key.is_none() => mismatch(
            "the store does not hold this key id's master key (it was registered with a caller-held key: pass it)",
        ),
        _ => Ok(()),
    }
}

/// The end (exclusive) of a lease of `count` ids from `next`: never past `2⁶⁴ − 1`, so the
/// id `2⁶⁴ − 1` (which derives epoch keys) is never leased.
///
/// # Errors
/// [`StoreError::Invalid`] for `count = 0`; [`StoreError::StreamsExhausted`].
pub fn lease_end(key_id: &str, next: u64, count: u64) -> Result<u64> {
    if count == 0 {
        return Err(StoreError::Invalid { what: "a lease of zero stream ids" });
    }
    next.checked_add(count)
        .ok_or_else(|| StoreError::StreamsExhausted { key_id: key_id.to_owned() })
}

/// Checks that the leases of a key id are disjoint and below its next stream id.
///
/// # Errors
/// [`StoreError::Corrupt`] naming the first overlap.
pub fn check_leases(key_id: &str, next_stream: u64, leases: &[Lease]) -> Result<()> {
    let mut sorted: Vec<&Lease> = leases.iter().collect();
    sorted.sort_by_key(|l| l.first);
    let mut end = 0u64;
    for l in sorted {
        let this_end = l.first.checked_add(l.count).ok_or_else(|| StoreError::Corrupt {
            what: format!("a lease of key id {key_id:?} passes 2^64"),
        })?;
        if l.first < end || l.count == 0 {
            return Err(StoreError::Corrupt {
                what: format!("leases of key id {key_id:?} overlap at stream id {}", l.first),
            });
        }
        end = this_end;
    }
    if end > next_stream {
        return Err(StoreError::Corrupt {
            what: format!("a lease of key id {key_id:?} ends past its next stream id"),
        });
    }
    Ok(())
}

/// Checks that every ledger's log length equals its charge rows: `(owner, unit, log_len,
/// rows)` per ledger.
///
/// # Errors
/// [`StoreError::Corrupt`] naming the first ledger that disagrees.
pub fn check_log_lengths(rows: &[(String, String, i64, i64)]) -> Result<()> {
    for (owner, unit, len, count) in rows {
        if len != count {
            return Err(StoreError::Corrupt {
                what: format!(
                    "ledger ({owner:?}, {unit}) counts {len} charges but holds {count} rows"
                ),
            });
        }
    }
    Ok(())
}

/// What [`audit`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditReport {
    /// The stored ledger, equal to the replay of its log.
    pub ledger: Ledger,
    /// The charge rows, in ledger order.
    pub records: Vec<ChargeRecord>,
}

/// Replays the charge log of `(owner, unit)` from the ledger it was opened with through the
/// core's [`Accountant::charge`], and checks that the result is the stored ledger, that the
/// ordinals run 0, 1, 2, … without gaps, and that every row is a charge the ledger accepts.
///
/// # Errors
/// [`StoreError::Corrupt`] when the stored ledger differs from the replay; the store's
/// errors.
pub fn audit(store: &mut dyn BudgetStore, owner: &str, unit: PrivacyUnit) -> Result<AuditReport> {
    let (opening, records) = store.charge_log(owner, unit)?;
    let stored =
        store.ledger(owner, unit)?.ok_or_else(|| StoreError::NoLedger { owner: owner.into() })?;
    let mut replay = opening;
    for (i, r) in records.iter().enumerate() {
        if r.ordinal != i as u64 {
            return Err(StoreError::Corrupt {
                what: format!("charge log of {owner:?} has ordinal {} at position {i}", r.ordinal),
            });
        }
        replay.charge(r.unit, &r.cost, r.mode).map_err(|e| StoreError::Corrupt {
            what: format!(
                "charge {:?} part {} of {owner:?} does not replay: {e}",
                r.charge_id, r.part
            ),
        })?;
    }
    if replay != stored {
        return Err(StoreError::Corrupt {
            what: format!(
                "the stored ledger of {owner:?} differs from the replay of its charge log"
            ),
        });
    }
    Ok(AuditReport { ledger: stored, records })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::DrawRecord;
    use dpattn_core::accounting::cost::Cost;
    use dpattn_core::{Error, NoiseMode, PrivacyBudget};

    fn draw(stream: u64) -> DrawRecord {
        DrawRecord { key_id: "k".into(), epoch: 5, stream, streams: 1 }
    }

    #[test]
    fn a_retry_is_free_a_changed_retry_is_refused_and_the_core_decides_the_rest() {
        let unit = PrivacyUnit::TOKEN;
        let total = PrivacyBudget::new(1.0, 1e-6).unwrap();
        let ledger = Ledger::new_approx(unit, total);
        let cost = Cost::Approx(PrivacyBudget::new(0.5, 1e-7).unwrap());
        let d0 = draw(0);
        let req = ChargeRequest {
            owner: "o",
            ledger_unit: unit,
            charge_id: "r1",
            part: 0,
            unit,
            cost: &cost,
            mode: NoiseMode::Exact,
            draw: &d0,
        };
        let Decision::Charge(after) = decide_charge(&ledger, None, &req).unwrap() else {
            panic!("a new charge must be charged")
        };
        let after = *after;
        let mut expected = ledger.clone();
        expected.charge(unit, &cost, NoiseMode::Exact).unwrap();
        assert_eq!(after, expected);
        let rec = ChargeRecord {
            charge_id: "r1".into(),
            part: 0,
            ordinal: 0,
            unit,
            cost,
            mode: NoiseMode::Exact,
            draw: d0.clone(),
        };
        assert_eq!(decide_charge(&after, Some(&rec), &req).unwrap(), Decision::Already);
        let other_cost = Cost::Approx(PrivacyBudget::new(0.25, 1e-7).unwrap());
        let d1 = draw(1);
        for (changed, what) in [
            (ChargeRequest { cost: &other_cost, ..req }, "another cost"),
            (
                ChargeRequest { unit: PrivacyUnit::tokens(2).unwrap(), ..req },
                "another privacy unit",
            ),
            (ChargeRequest { mode: NoiseMode::UnsafeFloat, ..req }, "another noise mode"),
            (ChargeRequest { draw: &d1, ..req }, "other stream ids"),
        ] {
            match decide_charge(&after, Some(&rec), &changed) {
                Err(StoreError::ChargeIdConflict { what: w, .. }) => assert!(w.starts_with(what)),
                other => panic!("{what}: {other:?}"),
            }
        }
        // Over budget and unit mismatch are the core's refusals.
        let big = Cost::Approx(PrivacyBudget::new(0.75, 0.0).unwrap());
        assert!(matches!(
            decide_charge(&after, None, &ChargeRequest { cost: &big, ..req }),
            Err(StoreError::Refused(Error::Infeasible { .. }))
        ));
        assert!(matches!(
            decide_charge(&after, None, &ChargeRequest { unit: PrivacyUnit::Prompt, ..req }),
            Err(StoreError::Refused(Error::UnitMismatch { .. }))
        ));
    }

    #[test]
    fn a_reopened_budget_must_be_the_stored_one() {
        let unit = PrivacyUnit::Prompt;
        let a = Ledger::new_approx(unit, PrivacyBudget::new(1.0, 1e-6).unwrap());
        let mut spent = a.clone();
        spent
            .charge(unit, &Cost::Approx(PrivacyBudget::new(0.5, 0.0).unwrap()), NoiseMode::Exact)
            .unwrap();
        assert!(check_budget("o", &spent, &a).is_ok(), "spending differs: still the same budget");
        let bigger = Ledger::new_approx(unit, PrivacyBudget::new(2.0, 1e-6).unwrap());
        assert!(matches!(
            check_budget("o", &spent, &bigger),
            Err(StoreError::BudgetMismatch { .. })
        ));
        let zcdp =
            Ledger::new_zcdp(unit, dpattn_core::accounting::composition::Rho::new(1.0).unwrap());
        assert!(check_budget("o", &a, &zcdp).is_err());
    }
}
