//! [`RdpCurve`]: an RDP curve on a fixed set of orders, composed order by order.
//!
//! **Guarantee.** Composition adds curves order by order (Mironov 2017, Prop. 1), and
//! `T`-fold composition multiplies by `T`, both rounded up exactly; conversion to (ε, δ)
//! goes through [`epsilon_from_rdp`] and [`delta_from_rdp`]. No allocation.

use super::conversion::scaled_rdp;
use super::round_up::{add_up, count_up, mul_up};
use super::{
    DEFAULT_ORDER_COUNT, DEFAULT_ORDERS, DeltaBound, EpsilonBound, RdpMechanism, check_orders,
    check_rdp_value, delta_from_rdp, epsilon_from_rdp,
};
use crate::error::{Error, Result};

/// An RDP curve on `N` fixed orders: `rdp()[i]` bounds ε at `orders()[i]`. No allocation;
/// `N` defaults to the 156 [`DEFAULT_ORDERS`] (`RdpCurve::default()`).
///
/// Composition adds curves order by order ([`compose`](Self::compose),
/// [`compose_curve`](Self::compose_curve)), rounding up; conversion gives (ε, δ)
/// ([`epsilon`](Self::epsilon), [`delta`](Self::delta)).
///
/// ```
/// use dpattn_core::accounting::rdp::{GaussianRdp, RdpCurve, SampledGaussianRdp};
/// let mut c = RdpCurve::new([2.0, 8.0, 32.0])?;
/// c.compose(&SampledGaussianRdp::new(0.01, 1.0)?, 1000)?;
/// c.compose(&GaussianRdp::new(10.0, 1.0)?, 1)?;
/// let e = c.epsilon(1e-6)?;
/// assert!((e.epsilon - 2.4767).abs() < 1e-4 && e.order == 8.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RdpCurve<const N: usize = DEFAULT_ORDER_COUNT> {
    orders: [f64; N],
    rdp: [f64; N],
}

impl Default for RdpCurve<DEFAULT_ORDER_COUNT> {
    /// The zero curve (no privacy spent) on [`DEFAULT_ORDERS`].
    fn default() -> Self {
        Self { orders: DEFAULT_ORDERS, rdp: [0.0; DEFAULT_ORDER_COUNT] }
    }
}

impl<const N: usize> RdpCurve<N> {
    /// The zero curve on `orders` (each finite in `(1, 1e6]`; `N ≥ 1`).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::RdpCurve;
    /// assert_eq!(RdpCurve::new([1.5, 2.0])?.rdp(), &[0.0, 0.0]);
    /// assert!(RdpCurve::new([1.0]).is_err() && RdpCurve::new([]).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `N = 0` or an invalid order.
    pub fn new(orders: [f64; N]) -> Result<Self> {
        check_orders(&orders)?;
        Ok(Self { orders, rdp: [0.0; N] })
    }

    /// A curve from given values (e.g. from another accountant).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::RdpCurve;
    /// let c = RdpCurve::from_values([2.0, 4.0], [0.5, f64::INFINITY])?;
    /// assert_eq!(c.epsilon(0.1)?.order, 2.0);
    /// assert!(RdpCurve::from_values([2.0], [f64::NAN]).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for an invalid order or a NaN or negative value.
    pub fn from_values(orders: [f64; N], rdp: [f64; N]) -> Result<Self> {
        check_orders(&orders)?;
        rdp.iter().try_for_each(|&r| check_rdp_value(r))?;
        Ok(Self { orders, rdp })
    }

    /// The curve of `steps` uses of `mechanism` on `orders`.
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::{GaussianRdp, RdpCurve};
    /// let c = RdpCurve::from_mechanism([2.0, 3.0], &GaussianRdp::new(1.0, 1.0)?, 4)?;
    /// assert_eq!(c.rdp(), &[4.0, 6.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new) and [`compose`](Self::compose).
    pub fn from_mechanism<M: RdpMechanism + ?Sized>(
        orders: [f64; N],
        mechanism: &M,
        steps: u64,
    ) -> Result<Self> {
        let mut c = Self::new(orders)?;
        c.compose(mechanism, steps)?;
        Ok(c)
    }

    /// The orders.
    ///
    /// ```
    /// # use dpattn_core::accounting::rdp::RdpCurve;
    /// assert_eq!(RdpCurve::new([3.0])?.orders(), &[3.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn orders(&self) -> &[f64; N] {
        &self.orders
    }

    /// The RDP values, one per order (each in `[0, +∞]`).
    ///
    /// ```
    /// # use dpattn_core::accounting::rdp::RdpCurve;
    /// assert_eq!(RdpCurve::new([3.0])?.rdp(), &[0.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn rdp(&self) -> &[f64; N] {
        &self.rdp
    }

    /// Adds `steps` uses of `mechanism` (RDP composition, Mironov 2017 Prop. 1), rounding
    /// up. On error the curve is unchanged.
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::{GaussianRdp, RdpCurve};
    /// let mut c = RdpCurve::new([2.0])?;
    /// let g = GaussianRdp::new(1.0, 1.0)?;
    /// c.compose(&g, 3)?;
    /// c.compose(&g, 0)?; // no-op
    /// assert_eq!(c.rdp(), &[3.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// Whatever `mechanism.rdp` returns; [`Error::OutOfRange`] if it returns NaN or a
    /// negative value.
    pub fn compose<M: RdpMechanism + ?Sized>(&mut self, mechanism: &M, steps: u64) -> Result<()> {
        let mut add = [0.0; N];
        for (s, &a) in add.iter_mut().zip(&self.orders) {
            *s = scaled_rdp(mechanism, a, steps)?;
        }
        for (r, s) in self.rdp.iter_mut().zip(add) {
            *r = add_up(*r, s);
        }
        Ok(())
    }

    /// Adds another curve on the same orders (order-wise sum, rounded up).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::RdpCurve;
    /// let mut a = RdpCurve::from_values([2.0, 4.0], [1.0, 2.0])?;
    /// a.compose_curve(&RdpCurve::from_values([2.0, 4.0], [0.5, 0.5])?)?;
    /// assert_eq!(a.rdp(), &[1.5, 2.5]);
    /// assert!(a.compose_curve(&RdpCurve::new([2.0, 5.0])?).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] (naming the first differing order of `other`) if the orders
    /// differ; the curve is then unchanged.
    pub fn compose_curve(&mut self, other: &Self) -> Result<()> {
        if let Some((_, &b)) = self.orders.iter().zip(&other.orders).find(|(a, b)| a != b) {
            return Err(Error::OutOfRange {
                name: "other.orders",
                value: b,
                allowed: "the same orders as this curve",
            });
        }
        for (r, &s) in self.rdp.iter_mut().zip(&other.rdp) {
            *r = add_up(*r, s);
        }
        Ok(())
    }

    /// The `times`-fold self-composition (every value multiplied by `times`, rounded up).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::RdpCurve;
    /// let c = RdpCurve::from_values([2.0], [0.25])?;
    /// assert_eq!(c.self_composed(8).rdp(), &[2.0]);
    /// assert_eq!(c.self_composed(0).rdp(), &[0.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn self_composed(&self, times: u64) -> Self {
        let t = count_up(times);
        let mut out = *self;
        for r in &mut out.rdp {
            *r = if times == 0 || *r == 0.0 { 0.0 } else { mul_up(*r, t) };
        }
        out
    }

    /// ε for the given δ ∈ (0, 1), minimised over the orders (see [`epsilon_from_rdp`]).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::{RdpCurve, SampledGaussianRdp};
    /// let c = RdpCurve::default().self_composed(1); // zero curve
    /// assert_eq!(c.epsilon(1e-5)?.epsilon, 0.0);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`epsilon_from_rdp`].
    pub fn epsilon(&self, delta: f64) -> Result<EpsilonBound> {
        epsilon_from_rdp(&self.orders, &self.rdp, delta)
    }

    /// δ for the given ε ≥ 0, minimised over the orders (see [`delta_from_rdp`]).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::{RdpCurve, SampledGaussianRdp};
    /// let mut c = RdpCurve::default();
    /// c.compose(&SampledGaussianRdp::new(0.01, 1.1)?, 10_000)?;
    /// let e = c.epsilon(1e-5)?;
    /// assert!((c.delta(e.epsilon)?.delta / 1e-5 - 1.0).abs() < 1e-12);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`delta_from_rdp`].
    pub fn delta(&self, epsilon: f64) -> Result<DeltaBound> {
        delta_from_rdp(&self.orders, &self.rdp, epsilon)
    }
}
