//! What one release costs ([`Cost`]), and the one way every mechanism charges it
//! ([`Accountant`]).
//!
//! A mechanism states its cost in the terms of its own analysis — an `(ε, δ)` guarantee, a
//! Gaussian release (with its zCDP `ρ`), the Poisson-subsampled Gaussian of a DP-SGD step —
//! together with its [`PrivacyUnit`] and its [`NoiseMode`]; the accountant (a
//! [`Ledger`] of any kind) converts the cost into its own books, or refuses it. Mechanisms
//! take `Option<&mut dyn Accountant>`, so "no ledger" is a plain `None`.

use crate::accounting::composition::Rho;
use crate::accounting::ledger::{Amount, Charge, Ledger};
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::accounting::rdp::{RdpCurve, SampledGaussianRdp};
use crate::error::{Error, Result};
use crate::grid_release::NoiseMode;
use crate::privacy_params::{Epsilon, PrivacyBudget};

/// The privacy cost of one release, as its mechanism's analysis states it.
///
/// ```
/// use dpattn_core::{NoiseMode, PrivacyBudget};
/// use dpattn_core::accounting::cost::{Accountant, Cost};
/// use dpattn_core::accounting::ledger::{Amount, Ledger};
/// use dpattn_core::accounting::composition::Rho;
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// let cost = Cost::Gaussian { approx: Some(PrivacyBudget::new(1.0, 1e-6)?), rho: 0.05 };
/// let mut approx = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(4.0, 1e-5)?);
/// let mut zcdp = Ledger::new_zcdp(PrivacyUnit::TOKEN, Rho::new(1.0)?);
/// approx.charge(PrivacyUnit::TOKEN, &cost, NoiseMode::Exact)?;
/// zcdp.charge(PrivacyUnit::TOKEN, &cost, NoiseMode::Exact)?;
/// assert_eq!(approx.spent(), Amount::Approx { epsilon: 1.0, delta: 1e-6 });
/// assert_eq!(zcdp.spent(), Amount::Zcdp { rho: 0.05 });
/// // A ledger for another unit refuses it.
/// let mut prompts = Ledger::new_zcdp(PrivacyUnit::Prompt, Rho::new(1.0)?);
/// assert!(prompts.charge(PrivacyUnit::TOKEN, &cost, NoiseMode::Exact).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cost {
    /// An `(ε, δ)` guarantee with no zCDP or RDP form (the softmax trees' truncated Laplace,
    /// paper 000): approximate-DP ledgers; zCDP and RDP ledgers only when `δ = 0`.
    Approx(PrivacyBudget),
    /// A pure `ε` guarantee: every ledger.
    Pure(Epsilon),
    /// A (discrete) Gaussian release: `(ε, δ)` on approximate-DP ledgers (`None` when the
    /// release has no stand-alone `(ε, δ)`, such as one release of a plan calibrated for its
    /// composition), its zCDP `ρ` on zCDP and RDP ledgers. `ρ = 0` (a constant release) is
    /// not charged to zCDP and RDP ledgers.
    Gaussian {
        /// The `(ε, δ)` an approximate-DP ledger is charged, if the release has one.
        approx: Option<PrivacyBudget>,
        /// The release's zCDP `ρ` (an upper bound).
        rho: f64,
    },
    /// `steps` Poisson-subsampled Gaussian releases (DP-SGD): RDP ledgers only, on their own
    /// orders.
    SubsampledGaussian {
        /// The sampling rate `q ∈ (0, 1]`.
        rate: f64,
        /// The noise multiplier (noise standard deviation over the sensitivity).
        noise_multiplier: f64,
        /// How many such releases.
        steps: u64,
    },
    /// A constant release: nothing is charged.
    Nothing,
}

/// Where releases are charged. Implemented by [`Ledger`] for every order count, so a
/// mechanism taking `Option<&mut dyn Accountant>` accepts `Some(&mut ledger)` or `None`.
pub trait Accountant {
    /// The privacy unit the accountant keeps books for.
    fn unit(&self) -> PrivacyUnit;

    /// The total budget, in the accountant's units.
    fn total(&self) -> Amount;

    /// Charges `cost` for a release protecting `unit`, made in `mode`: accepted only if the
    /// unit covers the accountant's and the composition stays within the total; refused
    /// otherwise, changing nothing.
    ///
    /// # Errors
    /// [`Error::UnitMismatch`]; [`Error::Unsupported`] for a cost this kind of ledger cannot
    /// take; the ledger's [`Error::Infeasible`] / [`Error::OutOfRange`] refusals.
    fn charge(&mut self, unit: PrivacyUnit, cost: &Cost, mode: NoiseMode) -> Result<()>;
}

impl<const N: usize> Accountant for Ledger<N> {
    fn unit(&self) -> PrivacyUnit {
        Ledger::unit(self)
    }

    fn total(&self) -> Amount {
        Ledger::total(self)
    }

    fn charge(&mut self, unit: PrivacyUnit, cost: &Cost, mode: NoiseMode) -> Result<()> {
        unit.check_charge(Ledger::unit(self))?;
        let approx = matches!(Ledger::total(self), Amount::Approx { .. });
        let charge = match *cost {
            Cost::Nothing => return Ok(()),
            Cost::Approx(b) => Charge::Approx(b),
            Cost::Pure(e) => Charge::Pure(e),
            Cost::Gaussian { approx: Some(b), .. } if approx => Charge::Approx(b),
            Cost::Gaussian { approx: None, .. } if approx => {
                return Err(Error::Unsupported {
                    what: "an approximate-DP ledger for a release with no stand-alone (epsilon, delta) \
                           (one release of a plan calibrated for its composition): use a zCDP or RDP \
                           ledger, or charge the whole plan once",
                });
            }
            Cost::Gaussian { rho: 0.0, .. } => return Ok(()),
            Cost::Gaussian { rho, .. } => Charge::Zcdp(Rho::new(rho)?),
            Cost::SubsampledGaussian { rate, noise_multiplier, steps } => {
                let Some(curve) = self.rdp_curve() else {
                    return Err(Error::Unsupported {
                        what: "a Poisson-subsampled Gaussian (DP-SGD) charge on a ledger that is not \
                               an RDP ledger (Ledger::new_rdp)",
                    });
                };
                let mech = SampledGaussianRdp::new(rate, noise_multiplier)?;
                Charge::Rdp(RdpCurve::from_mechanism(*curve.orders(), &mech, steps)?)
            }
        };
        self.try_charge_in(unit, charge, mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy_params::Delta;

    #[test]
    fn each_cost_goes_where_its_analysis_allows() {
        let unit = PrivacyUnit::Record;
        let b = PrivacyBudget::new(0.5, 1e-7).unwrap();
        let mut approx = Ledger::new_approx(unit, PrivacyBudget::new(10.0, 1e-3).unwrap());
        let mut zcdp = Ledger::new_zcdp(unit, Rho::new(10.0).unwrap());
        let mut rdp =
            Ledger::new_rdp(unit, Epsilon::new(50.0).unwrap(), Delta::new(1e-5).unwrap()).unwrap();
        let mode = NoiseMode::Exact;
        // (ε, δ) with δ > 0: approximate-DP ledgers only.
        assert!(approx.charge(unit, &Cost::Approx(b), mode).is_ok());
        assert!(zcdp.charge(unit, &Cost::Approx(b), mode).is_err());
        // A Gaussian without a stand-alone (ε, δ): refused by the approximate ledger only.
        let plan = Cost::Gaussian { approx: None, rho: 0.125 };
        assert!(matches!(approx.charge(unit, &plan, mode), Err(Error::Unsupported { .. })));
        assert!(zcdp.charge(unit, &plan, mode).is_ok());
        assert!(rdp.charge(unit, &plan, mode).is_ok());
        assert_eq!(zcdp.spent(), Amount::Zcdp { rho: 0.125 });
        // ρ = 0 and Nothing are free.
        let before = (approx.charges(), zcdp.charges());
        zcdp.charge(unit, &Cost::Gaussian { approx: Some(b), rho: 0.0 }, mode).unwrap();
        approx.charge(unit, &Cost::Nothing, mode).unwrap();
        assert_eq!((approx.charges(), zcdp.charges()), before);
        // DP-SGD: RDP only, the curve on the ledger's orders equals the mechanism's.
        let sg = Cost::SubsampledGaussian { rate: 0.01, noise_multiplier: 1.1, steps: 100 };
        assert!(zcdp.charge(unit, &sg, mode).is_err());
        let mut fresh =
            Ledger::new_rdp(unit, Epsilon::new(50.0).unwrap(), Delta::new(1e-5).unwrap()).unwrap();
        fresh.charge(unit, &sg, mode).unwrap();
        let mut manual =
            Ledger::new_rdp(unit, Epsilon::new(50.0).unwrap(), Delta::new(1e-5).unwrap()).unwrap();
        let curve = RdpCurve::from_mechanism(
            *manual.rdp_curve().unwrap().orders(),
            &SampledGaussianRdp::new(0.01, 1.1).unwrap(),
            100,
        )
        .unwrap();
        manual.try_charge(unit, Charge::Rdp(curve)).unwrap();
        assert_eq!(fresh.spent(), manual.spent());
        // Unit mismatch and the unsafe-float count.
        assert!(matches!(
            approx.charge(PrivacyUnit::Prompt, &Cost::Pure(Epsilon::new(0.1).unwrap()), mode),
            Err(Error::UnitMismatch { .. })
        ));
        approx
            .charge(unit, &Cost::Pure(Epsilon::new(0.1).unwrap()), NoiseMode::UnsafeFloat)
            .unwrap();
        assert_eq!(approx.unsafe_float_charges(), 1);
    }
}
