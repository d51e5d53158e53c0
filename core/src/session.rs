//! [`Session`]: the one object a release needs — a secret key, the next unused stream id,
//! and the ledger of one privacy unit — so that a `(key, stream)` pair can never serve two
//! releases and every release is charged.
//!
//! **Why.** Noise is a function of `(key, stream id, element)` (`docs/RANDOMNESS.md`). Two
//! releases on the same pair get the same noise, and their difference reveals the exact
//! noise-free difference of their inputs. Every mechanism's primary entry point therefore
//! takes a session: [`Session::begin`] hands out fresh stream ids (never the same twice) and
//! the ledger the release must be charged to. The explicit `(key, stream)` entry points
//! (`*_keyed`) remain for replay, audit, and hosts that manage their own stream ids.
//!
//! **Keys.** A session holds a master key (from the operating system by default,
//! [`Session::new`]; from a caller's `CryptoRng` on `no_std` targets) and draws with an
//! *epoch key* derived from it: `epoch_key(master, e)` is the first 32 bytes of the ChaCha20
//! block of `master` at block counter `e` and stream id `2⁶⁴ − 1`, a pseudorandom function of
//! `e` (no session ever draws noise on that stream of the master key). The epoch `e` is a
//! fresh random 64-bit number at creation and at every [`restore`](Session::restore).
//!
//! **Save and restore.** [`Session::save`] captures the master key, the next stream id and
//! the ledger; [`Session::restore`] rebuilds a session from such a state **in a new epoch**.
//! Restoring an older save therefore cannot reissue a `(key, stream)` pair that a later
//! release used: the stream counter may repeat, but under a different epoch key (two epochs
//! coincide with probability `2⁻⁶⁴` per pair of restores). What an older save cannot know is
//! the budget spent after it was taken: restoring it would under-count. Keep the newest save
//! only, written before each release is returned — or keep the ledger and the stream counter
//! in a durable, transactional store instead: the `dpattn-store` crate (`docs/PRIVACY.md`
//! §11), whose sessions charge before they draw and lease stream ids across processes.
//!
//! **Audit.** Each release reports its epoch and stream ids ([`Draw`]); with the master key
//! an auditor recomputes the epoch key ([`epoch_key`]) and replays the noise.

use rand_core::CryptoRng;

use crate::accounting::cost::Accountant;
use crate::accounting::ledger::Ledger;
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::accounting::rdp::DEFAULT_ORDER_COUNT;
use crate::error::{Error, Result};
use crate::sampling::{NoiseKey, chacha20_block};

/// The stream id of the master key that derives epoch keys; never used for noise.
const DERIVATION_STREAM: u64 = u64::MAX;

/// The randomness of one release: a key and the first of the consecutive stream ids the
/// release uses (each mechanism documents how many: [`Session::begin`]'s `streams`).
///
/// ```
/// use dpattn_core::session::Draw;
/// use dpattn_core::sampling::{KeyedStream, NoiseKey};
/// let key = NoiseKey::generate()?;
/// let draw = Draw { key: &key, stream: 7 };
/// assert_eq!(draw.keyed(0).stream_id(), 7);
/// assert_eq!(draw.keyed(2).stream_id(), 9);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Draw<'a> {
    /// The key.
    pub key: &'a NoiseKey,
    /// The first stream id.
    pub stream: u64,
}

impl Draw<'_> {
    /// The keyed stream of the release's `i`-th stream id (`stream + i`, wrapping is never
    /// reached: sessions never hand out `2⁶⁴ − 1`).
    pub fn keyed(&self, i: u64) -> crate::sampling::KeyedStream {
        crate::sampling::KeyedStream::new(self.key, self.stream.wrapping_add(i))
    }
}

/// The epoch key of `master` at epoch `epoch` (module docs).
///
/// ```
/// use dpattn_core::session::epoch_key;
/// use dpattn_core::sampling::NoiseKey;
/// let master = NoiseKey::generate()?;
/// assert_ne!(epoch_key(&master, 1), epoch_key(&master, 2));
/// assert_eq!(epoch_key(&master, 1), epoch_key(&master, 1));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn epoch_key(master: &NoiseKey, epoch: u64) -> NoiseKey {
    let words = chacha20_block(&master.words(), epoch, DERIVATION_STREAM);
    let mut bytes = [0u8; 32];
    for (chunk, w) in bytes.chunks_exact_mut(4).zip(&words[..8]) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    let key = NoiseKey::for_replay(bytes);
    zeroize::Zeroize::zeroize(&mut bytes);
    key
}

/// A master key, its current epoch key and the next unused stream id: the randomness half
/// of a [`Session`], usable alone by hosts that keep their ledger elsewhere (the C ABI's
/// session shares a ledger handle). It hands out every stream id of an epoch once.
///
/// ```
/// use dpattn_core::session::NoiseSource;
/// let mut source = NoiseSource::new()?;
/// let (a, b) = (source.reserve(2)?.stream, source.reserve(1)?.stream);
/// assert_eq!(b, a + 2);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct NoiseSource {
    master: NoiseKey,
    epoch: u64,
    key: NoiseKey,
    next_stream: u64,
}

impl NoiseSource {
    /// A master key and an epoch from the operating system.
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the operating system's generator fails.
    #[cfg(feature = "std")]
    pub fn new() -> Result<Self> {
        Ok(Self::for_replay(NoiseKey::generate()?, os_epoch()?, 0))
    }

    /// A master key and an epoch from `rng` (`no_std` and enclave targets).
    pub fn from_rng<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let master = NoiseKey::from_rng(rng);
        Self::for_replay(master, rng.next_u64(), 0)
    }

    /// `master` at the stated `epoch` and next stream id: **for replay and audit only** —
    /// it reissues the stream ids of a past run on purpose. A service restarts with
    /// [`restore`](Self::restore), which picks a fresh epoch.
    pub fn for_replay(master: NoiseKey, epoch: u64, next_stream: u64) -> Self {
        let key = epoch_key(&master, epoch);
        Self { master, epoch, key, next_stream }
    }

    /// `master` with the saved next stream id, in a fresh epoch from the operating system
    /// (module docs: no `(key, stream)` pair used before can be reissued).
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the operating system's generator fails.
    #[cfg(feature = "std")]
    pub fn restore(master: NoiseKey, next_stream: u64) -> Result<Self> {
        Ok(Self::for_replay(master, os_epoch()?, next_stream))
    }

    /// [`restore`](Self::restore) with the new epoch from `rng`.
    pub fn restore_with_rng<R: CryptoRng + ?Sized>(
        master: NoiseKey,
        next_stream: u64,
        rng: &mut R,
    ) -> Self {
        Self::for_replay(master, rng.next_u64(), next_stream)
    }

    /// The current epoch (module docs).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The first stream id the next release will get.
    pub fn next_stream(&self) -> u64 {
        self.next_stream
    }

    /// The master key, for a key store and for audit. As sensitive as the data.
    pub fn master_key(&self) -> &NoiseKey {
        &self.master
    }

    /// Reserves `streams ≥ 1` fresh consecutive stream ids and returns them with the epoch
    /// key. The ids are consumed even if the release then fails: a stream id is never handed
    /// out twice in an epoch.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `streams = 0`; [`Error::SizeOverflow`] when the epoch's
    /// `2⁶⁴ − 1` stream ids are used up (restore to start a new epoch).
    pub fn reserve(&mut self, streams: u64) -> Result<Draw<'_>> {
        if streams == 0 {
            return Err(Error::OutOfRange { name: "streams", value: 0.0, allowed: ">= 1" });
        }
        let first = self.next_stream;
        // `next_stream ≤ 2⁶⁴ − 1` always, so the id `2⁶⁴ − 1` (DERIVATION_STREAM) is never
        // handed out: a reservation starting there overflows.
        self.next_stream = first
            .checked_add(streams)
            .ok_or(Error::SizeOverflow { what: "the session's stream ids (start a new epoch)" })?;
        Ok(Draw { key: &self.key, stream: first })
    }
}

/// A key, the next unused stream id and a ledger: see the [module documentation](self).
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::session::Session;
/// let ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(4.0, 1e-5)?);
/// let mut session = Session::new(ledger)?;
/// let first = session.begin(1)?.draw.stream;
/// let second = session.begin(3)?.draw.stream;
/// assert_eq!(second, first + 1); // never the same stream twice
/// assert_eq!(session.next_stream(), first + 4);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Session<const N: usize = DEFAULT_ORDER_COUNT> {
    source: NoiseSource,
    ledger: Ledger<N>,
}

/// What one release borrows from a [`Session`]: its randomness and the session's ledger.
pub struct Release<'s> {
    /// The key and the first of the stream ids reserved for the release.
    pub draw: Draw<'s>,
    /// The session's epoch (for audit).
    pub epoch: u64,
    /// The ledger the release must be charged to.
    pub ledger: &'s mut dyn Accountant,
}

impl<const N: usize> Session<N> {
    /// A session over `ledger` with a master key and an epoch from the operating system.
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the operating system's generator fails.
    #[cfg(feature = "std")]
    pub fn new(ledger: Ledger<N>) -> Result<Self> {
        Ok(Self { source: NoiseSource::new()?, ledger })
    }

    /// A session over `ledger` whose master key and epoch come from `rng` (`no_std` and
    /// enclave targets).
    pub fn from_rng<R: CryptoRng + ?Sized>(ledger: Ledger<N>, rng: &mut R) -> Self {
        Self { source: NoiseSource::from_rng(rng), ledger }
    }

    /// A session over `ledger` drawing from `source` (e.g. [`NoiseSource::for_replay`] for
    /// an audit).
    pub fn with_source(source: NoiseSource, ledger: Ledger<N>) -> Self {
        Self { source, ledger }
    }

    /// The privacy unit of the session's ledger.
    pub fn unit(&self) -> PrivacyUnit {
        self.ledger.unit()
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger<N> {
        &self.ledger
    }

    /// The randomness half (epoch, next stream id, master key).
    pub fn source(&self) -> &NoiseSource {
        &self.source
    }

    /// The current epoch (module docs).
    pub fn epoch(&self) -> u64 {
        self.source.epoch
    }

    /// The first stream id the next release will get.
    pub fn next_stream(&self) -> u64 {
        self.source.next_stream
    }

    /// The master key, for a key store and for audit. As sensitive as the data.
    pub fn master_key(&self) -> &NoiseKey {
        &self.source.master
    }

    /// Reserves `streams ≥ 1` fresh consecutive stream ids for one release
    /// ([`NoiseSource::reserve`]) and lends it the epoch key and the ledger.
    ///
    /// # Errors
    /// As [`NoiseSource::reserve`].
    pub fn begin(&mut self, streams: u64) -> Result<Release<'_>> {
        let epoch = self.source.epoch;
        let draw = self.source.reserve(streams)?;
        Ok(Release { draw, epoch, ledger: &mut self.ledger })
    }

    /// The state to store for a restart: the master key, the next stream id and the ledger.
    pub fn save(&self) -> SessionState<N> {
        SessionState {
            master: self.source.master.clone(),
            next_stream: self.source.next_stream,
            ledger: self.ledger.clone(),
        }
    }

    /// A session rebuilt from `state` in a fresh epoch from the operating system (module
    /// docs: no `(key, stream)` pair used before can be reissued).
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the operating system's generator fails.
    #[cfg(feature = "std")]
    pub fn restore(state: SessionState<N>) -> Result<Self> {
        let source = NoiseSource::restore(state.master, state.next_stream)?;
        Ok(Self { source, ledger: state.ledger })
    }

    /// [`restore`](Self::restore) with the new epoch from `rng`.
    pub fn restore_with_rng<R: CryptoRng + ?Sized>(state: SessionState<N>, rng: &mut R) -> Self {
        let source = NoiseSource::restore_with_rng(state.master, state.next_stream, rng);
        Self { source, ledger: state.ledger }
    }
}

#[cfg(feature = "std")]
fn os_epoch() -> Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|_| Error::Unsupported {
        what: "a session epoch: the operating system's random number generator failed",
    })?;
    Ok(u64::from_le_bytes(b))
}

/// A saved [`Session`]: master key, next stream id and ledger. It contains the master key —
/// store it like the key itself.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionState<const N: usize = DEFAULT_ORDER_COUNT> {
    master: NoiseKey,
    next_stream: u64,
    ledger: Ledger<N>,
}

/// The first bytes of an encoded session state.
const MAGIC: [u8; 8] = *b"DPATTNS1";

impl<const N: usize> SessionState<N> {
    /// Bytes of [`encode`](Self::encode).
    pub const ENCODED_LEN: usize = 8 + 32 + 8 + Ledger::<N>::ENCODED_LEN;

    /// The ledger as saved.
    pub fn ledger(&self) -> &Ledger<N> {
        &self.ledger
    }

    /// The next stream id as saved.
    pub fn next_stream(&self) -> u64 {
        self.next_stream
    }

    /// A state from its parts (a host that keeps the ledger apart from its
    /// [`NoiseSource`]).
    pub fn from_parts(source: &NoiseSource, ledger: Ledger<N>) -> Self {
        Self { master: source.master.clone(), next_stream: source.next_stream, ledger }
    }

    /// The parts: the master key, the next stream id and the ledger.
    pub fn into_parts(self) -> (NoiseKey, u64, Ledger<N>) {
        (self.master, self.next_stream, self.ledger)
    }

    /// Writes the state to `out[..ENCODED_LEN]`: a magic, the master key, the next stream id
    /// (little-endian) and the ledger ([`Ledger::encode`]).
    ///
    /// ```
    /// use dpattn_core::PrivacyBudget;
    /// use dpattn_core::accounting::ledger::Ledger;
    /// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    /// use dpattn_core::session::{Session, SessionState};
    /// let ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(4.0, 1e-5)?);
    /// let session = Session::new(ledger)?;
    /// let mut bytes = vec![0u8; <SessionState>::ENCODED_LEN];
    /// session.save().encode(&mut bytes)?;
    /// assert_eq!(SessionState::decode(&bytes)?, session.save());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BufferTooShort`] for a short `out`.
    pub fn encode(&self, out: &mut [u8]) -> Result<()> {
        if out.len() < Self::ENCODED_LEN {
            return Err(Error::BufferTooShort {
                arg: "session state",
                needed: Self::ENCODED_LEN,
                got: out.len(),
            });
        }
        out[..8].copy_from_slice(&MAGIC);
        out[8..40].copy_from_slice(self.master.expose_bytes());
        out[40..48].copy_from_slice(&self.next_stream.to_le_bytes());
        self.ledger.encode(&mut out[48..])
    }

    /// Reads a state written by [`encode`](Self::encode).
    ///
    /// # Errors
    /// [`Error::BufferTooShort`]; [`Error::OutOfRange`] for bytes that are not a session
    /// state with `N` ledger orders.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < Self::ENCODED_LEN {
            return Err(Error::BufferTooShort {
                arg: "session state",
                needed: Self::ENCODED_LEN,
                got: bytes.len(),
            });
        }
        if bytes[..8] != MAGIC {
            return Err(Error::OutOfRange {
                name: "session state",
                value: f64::NAN,
                allowed: "bytes written by SessionState::encode",
            });
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(&bytes[8..40]);
        let master = NoiseKey::for_replay(key);
        zeroize::Zeroize::zeroize(&mut key);
        let mut next = [0u8; 8];
        next.copy_from_slice(&bytes[40..48]);
        Ok(Self {
            master,
            next_stream: u64::from_le_bytes(next),
            ledger: Ledger::decode(&bytes[48..])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy_params::PrivacyBudget;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};

    #[test]
    fn the_epoch_key_is_the_chacha20_block_at_counter_epoch_on_the_last_stream() {
        // Independent reference: rand_chacha's ChaCha20 at word position 16·epoch of stream
        // 2⁶⁴ − 1 (RANDOMNESS.md §1 maps block counter c to word position 16c).
        let master = [0x5Au8; 32];
        for epoch in [0u64, 1, 0x0123_4567_89AB_CDEF, u64::MAX >> 4] {
            let mut rng = ChaCha20Rng::from_seed(master);
            rng.set_stream(u64::MAX);
            rng.set_word_pos(u128::from(epoch) * 16);
            let mut expected = [0u8; 32];
            for chunk in expected.chunks_exact_mut(4) {
                chunk.copy_from_slice(&rng.next_u32().to_le_bytes());
            }
            let got = epoch_key(&NoiseKey::for_replay(master), epoch);
            assert_eq!(got.expose_bytes(), &expected, "epoch {epoch}");
        }
    }

    #[test]
    fn reserve_refuses_the_derivation_stream_and_zero_streams() {
        let mut s = NoiseSource::for_replay(NoiseKey::for_replay([1; 32]), 3, u64::MAX - 3);
        assert_eq!(s.reserve(2).unwrap().stream, u64::MAX - 3);
        // Ids u64::MAX − 1 and u64::MAX are left: the last one derives epoch keys.
        assert!(matches!(s.reserve(2), Err(Error::SizeOverflow { .. })));
        assert_eq!(s.next_stream(), u64::MAX - 1, "a refused reservation consumes nothing");
        assert!(matches!(s.reserve(0), Err(Error::OutOfRange { .. })));
        assert_eq!(s.reserve(1).unwrap().stream, u64::MAX - 1);
    }

    #[test]
    fn a_state_survives_encoding_and_refuses_foreign_bytes() {
        let ledger =
            Ledger::new_approx(PrivacyUnit::Prompt, PrivacyBudget::new(2.0, 1e-6).unwrap());
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let mut session: Session = Session::from_rng(ledger, &mut rng);
        session.begin(3).unwrap();
        let mut bytes = [0u8; SessionState::<DEFAULT_ORDER_COUNT>::ENCODED_LEN];
        session.save().encode(&mut bytes).unwrap();
        let back = SessionState::decode(&bytes).unwrap();
        assert_eq!(back, session.save());
        assert_eq!(back.next_stream(), session.next_stream());
        bytes[0] ^= 1;
        assert!(SessionState::<DEFAULT_ORDER_COUNT>::decode(&bytes).is_err());
        assert!(SessionState::<DEFAULT_ORDER_COUNT>::decode(&bytes[..10]).is_err());
    }
}
