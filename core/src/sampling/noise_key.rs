//! [`NoiseKey`]: the secret every noise draw is keyed by.
//!
//! **Security.** The noise of a release is exactly as unpredictable as its key is secret:
//! whoever holds the key can recompute the noise and subtract it. So a key comes from a
//! cryptographic source — [`NoiseKey::generate`] (the operating system, under `std`) or
//! [`NoiseKey::from_rng`] (a caller's `CryptoRng`, on `no_std` and enclave targets) — never
//! from a constant. [`NoiseKey::for_replay`] rebuilds a key from stored bytes, to replay or
//! audit a release whose key was kept in a key store, or for test vectors; its name says so.
//! A key's bytes leave it only through [`NoiseKey::expose_bytes`] (to store it). `Debug`
//! never prints them, and they are overwritten with zeros when the key is dropped (as are the
//! copies a [`KeyedStream`](super::KeyedStream) holds). `docs/PRIVACY.md` §9 says how to
//! make, store and rotate keys.

use core::fmt;

use rand_core::CryptoRng;
use zeroize::Zeroize;

#[cfg(feature = "std")]
use crate::error::Result;

/// A 256-bit ChaCha20 key (little-endian words, as ChaCha20 and `rand_chacha` read them).
/// `Debug` does not print it; it is zeroed on drop.
///
/// ```
/// use dpattn_core::sampling::NoiseKey;
/// let key = NoiseKey::generate()?; // from the operating system
/// assert_eq!(format!("{key:?}"), "NoiseKey(<redacted>)");
/// assert_ne!(key, NoiseKey::generate()?);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct NoiseKey([u8; 32]);

impl NoiseKey {
    /// A fresh key from the operating system's cryptographic random number generator: the
    /// default way to make a key.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) if the operating system's generator
    /// fails (no key is returned rather than a weak one).
    #[cfg(feature = "std")]
    pub fn generate() -> Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|_| crate::Error::Unsupported {
            what: "a noise key: the operating system's random number generator failed",
        })?;
        Ok(Self(bytes))
    }

    /// A fresh key from a cryptographic random number generator the caller owns (`no_std`
    /// and enclave targets, where there is no operating system to ask).
    ///
    /// ```
    /// use dpattn_core::sampling::NoiseKey;
    /// use rand_chacha::ChaCha20Rng;
    /// use rand_core::SeedableRng;
    /// // In an enclave: a generator seeded from the platform's hardware entropy.
    /// # let entropy = [0u8; 32];
    /// let mut rng = ChaCha20Rng::from_seed(entropy);
    /// let key = NoiseKey::from_rng(&mut rng);
    /// assert_ne!(key, NoiseKey::from_rng(&mut rng));
    /// ```
    pub fn from_rng<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let mut bytes = [0u8; 32];
        rng.fill_bytes(&mut bytes);
        Self(bytes)
    }

    /// A key rebuilt from stored bytes: **for replay and audit** of a release whose key was
    /// kept in a key store, and for test vectors. Never a constant in production code — a key
    /// anyone can read lets them subtract the noise.
    ///
    /// ```
    /// use dpattn_core::sampling::NoiseKey;
    /// let key = NoiseKey::generate()?;
    /// let stored: [u8; 32] = *key.expose_bytes(); // into a key store
    /// assert_eq!(NoiseKey::for_replay(stored), key);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub const fn for_replay(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The key's bytes, to put in a key store. They are as sensitive as the data the noise
    /// protects.
    pub const fn expose_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The key as the eight little-endian words of ChaCha20 state words 4–11.
    pub(crate) fn words(&self) -> [u32; 8] {
        let mut words = [0u32; 8];
        for (w, chunk) in words.iter_mut().zip(self.0.chunks_exact(4)) {
            *w = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        words
    }
}

impl Drop for NoiseKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for NoiseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NoiseKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "std")]
    fn keys_are_random_and_replayable() {
        let a = NoiseKey::generate().unwrap();
        let b = NoiseKey::generate().unwrap();
        assert_ne!(a, b);
        assert_ne!(a.expose_bytes(), &[0u8; 32]);
        assert_eq!(NoiseKey::for_replay(*a.expose_bytes()), a);
        assert_eq!(std::format!("{a:?}"), "NoiseKey(<redacted>)");
        let w = NoiseKey::for_replay(core::array::from_fn(|i| i as u8)).words();
        assert_eq!(w[0], 0x0302_0100);
        assert_eq!(w[7], 0x1f1e_1d1c);
    }
}
