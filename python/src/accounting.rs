//! Keys, ledgers and sessions: `NoiseKey`, `Ledger`, `Session` (the core's
//! `dpattn_core::session` and `accounting::ledger`). A session's key comes from the operating
//! system and each release through it uses a fresh stream id; its ledger is charged before
//! any noise is drawn.

use dpattn_core::PrivacyBudget;
use dpattn_core::accounting::composition::Rho;
use dpattn_core::accounting::ledger::{self, Amount};
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::sampling::NoiseKey as CoreKey;
use dpattn_core::session::{self, SessionState};
use dpattn_core::{Delta, Epsilon};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyDictMethods};

use crate::errors::{OrRaise, invalid};

/// A privacy unit from its Python name.
pub(crate) fn parse_unit(name: &str) -> PyResult<PrivacyUnit> {
    Ok(match name {
        "token" => PrivacyUnit::TOKEN,
        "feature_column" => PrivacyUnit::FeatureColumn,
        "sequence" => PrivacyUnit::Sequence,
        "prompt" => PrivacyUnit::Prompt,
        "record" => PrivacyUnit::Record,
        _ => match name.strip_prefix("tokens:").and_then(|c| c.parse::<u32>().ok()) {
            Some(c) => PrivacyUnit::tokens(c).or_raise()?,
            None => {
                return Err(invalid(
                    "out_of_range",
                    format!(
                        "unknown privacy unit {name:?}; expected \"token\", \"tokens:<c>\", \
                         \"feature_column\", \"sequence\", \"prompt\" or \"record\""
                    ),
                ));
            }
        },
    })
}

/// The Python name of a privacy unit.
pub(crate) fn unit_name(unit: PrivacyUnit) -> String {
    match unit {
        PrivacyUnit::Tokens(c) if c.get() == 1 => "token".into(),
        PrivacyUnit::Tokens(c) => format!("tokens:{c}"),
        PrivacyUnit::FeatureColumn => "feature_column".into(),
        PrivacyUnit::Sequence => "sequence".into(),
        PrivacyUnit::Prompt => "prompt".into(),
        PrivacyUnit::Record => "record".into(),
    }
}

/// A 256-bit ChaCha20 key for noise streams. `repr` never shows it.
#[pyclass(module = "dpattn", frozen)]
pub(crate) struct NoiseKey(pub(crate) CoreKey);

#[pymethods]
impl NoiseKey {
    /// A fresh key from the operating system's random number generator.
    #[staticmethod]
    fn generate() -> PyResult<Self> {
        Ok(Self(CoreKey::generate().or_raise()?))
    }

    /// A fixed key of 32 bytes: **for replay and audit only** (a `(key, stream)` pair must
    /// never serve two releases).
    #[staticmethod]
    fn for_replay(key: &[u8]) -> PyResult<Self> {
        let bytes: [u8; 32] = key.try_into().map_err(|_| {
            invalid("out_of_range", format!("a noise key has 32 bytes, got {}", key.len()))
        })?;
        Ok(Self(CoreKey::for_replay(bytes)))
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.0.expose_bytes())
    }

    fn __repr__(&self) -> &'static str {
        "NoiseKey(<redacted>)"
    }
}

/// A privacy budget for one privacy unit (a copy when read from a session).
#[pyclass(module = "dpattn", frozen)]
#[derive(Clone)]
pub(crate) struct Ledger(pub(crate) ledger::Ledger);

fn amount<'py>(py: Python<'py>, a: Amount) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match a {
        Amount::Approx { epsilon, delta } | Amount::Rdp { epsilon, delta } => {
            d.set_item("epsilon", epsilon)?;
            d.set_item("delta", delta)?;
        }
        Amount::Zcdp { rho } => d.set_item("rho", rho)?,
    }
    Ok(d)
}

#[pymethods]
impl Ledger {
    /// An (ε, δ) ledger under basic composition.
    #[staticmethod]
    fn approx(unit: &str, epsilon: f64, delta: f64) -> PyResult<Self> {
        let total = PrivacyBudget::new(epsilon, delta).or_raise()?;
        Ok(Self(ledger::Ledger::new_approx(parse_unit(unit)?, total)))
    }

    /// A ρ-zCDP ledger.
    #[staticmethod]
    fn zcdp(unit: &str, rho: f64) -> PyResult<Self> {
        Ok(Self(ledger::Ledger::new_zcdp(parse_unit(unit)?, Rho::new(rho).or_raise()?)))
    }

    /// A Rényi-DP ledger with a target (ε, δ).
    #[staticmethod]
    fn rdp(unit: &str, epsilon: f64, delta: f64) -> PyResult<Self> {
        let (e, d) = (Epsilon::new(epsilon).or_raise()?, Delta::new(delta).or_raise()?);
        Ok(Self(ledger::Ledger::new_rdp(parse_unit(unit)?, e, d).or_raise()?))
    }

    #[getter]
    fn unit(&self) -> String {
        unit_name(self.0.unit())
    }

    #[getter]
    fn kind(&self) -> &'static str {
        match self.0.total() {
            Amount::Approx { .. } => "approx",
            Amount::Zcdp { .. } => "zcdp",
            Amount::Rdp { .. } => "rdp",
        }
    }

    #[getter]
    fn spent<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        amount(py, self.0.spent())
    }

    #[getter]
    fn remaining<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        amount(py, self.0.remaining())
    }

    #[getter]
    fn total<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        amount(py, self.0.total())
    }

    #[getter]
    fn charges(&self) -> u64 {
        self.0.charges()
    }

    #[getter]
    fn unsafe_float_charges(&self) -> u64 {
        self.0.unsafe_float_charges()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Ledger(kind={:?}, unit={:?}, spent={}, total={}, charges={})",
            self.kind(),
            self.unit(),
            self.spent(py)?.repr()?,
            self.total(py)?.repr()?,
            self.0.charges()
        ))
    }
}

/// A key from the operating system, the next unused stream id and a ledger.
#[pyclass(module = "dpattn")]
pub(crate) struct Session(pub(crate) session::Session);

#[pymethods]
impl Session {
    #[new]
    fn new(ledger: &Ledger) -> PyResult<Self> {
        Ok(Self(session::Session::new(ledger.0.clone()).or_raise()?))
    }

    /// A copy of the session's ledger.
    #[getter]
    fn ledger(&self) -> Ledger {
        Ledger(self.0.ledger().clone())
    }

    #[getter]
    fn unit(&self) -> String {
        unit_name(self.0.unit())
    }

    #[getter]
    fn next_stream(&self) -> u64 {
        self.0.next_stream()
    }

    #[getter]
    fn epoch(&self) -> u64 {
        self.0.epoch()
    }

    /// The session's state (master key, next stream, ledger): store it secretly.
    fn save<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut bytes = vec![0u8; <SessionState>::ENCODED_LEN];
        self.0.save().encode(&mut bytes).or_raise()?;
        let out = PyBytes::new(py, &bytes);
        bytes.fill(0);
        Ok(out)
    }

    /// A session from `save`'s bytes, drawing in a fresh epoch.
    #[staticmethod]
    fn restore(state: &[u8]) -> PyResult<Self> {
        let state = SessionState::decode(state).or_raise()?;
        Ok(Self(session::Session::restore(state).or_raise()?))
    }

    fn __repr__(&self) -> String {
        format!(
            "Session(unit={:?}, epoch={}, next_stream={}, charges={})",
            self.unit(),
            self.0.epoch(),
            self.0.next_stream(),
            self.0.ledger().charges()
        )
    }
}

/// Where a release's noise comes from: a session (a fresh stream id; its ledger is charged)
/// or, for replay and audit, a fixed key and stream with no ledger.
pub(crate) enum Source<'a> {
    /// Through a session.
    Session(&'a mut session::Session),
    /// A fixed key and stream id.
    Keyed(&'a CoreKey, u64),
}
