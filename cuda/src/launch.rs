//! Launch configurations and index math, as pure functions tested on every machine.
//!
//! A fill of `n` elements starting at logical element `first`, with `epb` elements per
//! ChaCha20 block, covers blocks `first / epb ..= (first + n − 1) / epb`; thread `t` of the
//! grid computes one whole block. A clip launch runs one CUDA block per row. Nothing here
//! depends on a thread or block id for *which* noise an element gets, only for who computes
//! it.
//!
//! ```
//! use dpattn_cuda::launch::FillPlan;
//! let p = FillPlan::new(10, 5, 16, 132)?; // elements 5..15, 16 per ChaCha block
//! assert_eq!((p.first_block, p.skip, p.chacha_blocks), (0, 5, 1));
//! let p = FillPlan::new(100, 15, 8, 132)?;
//! assert_eq!((p.first_block, p.skip, p.chacha_blocks), (1, 7, 14));
//! # Ok::<(), dpattn_core::Error>(())
//! ```

use dpattn_core::Error;

/// Threads per block of the fill kernel (`DP_FILL_THREADS`).
pub const FILL_THREADS: u32 = 256;
/// Threads per block of the clip kernel (`DP_CLIP_THREADS`).
pub const CLIP_THREADS: u32 = 256;
/// Resident blocks per SM the grid-stride launches aim for.
pub const BLOCKS_PER_SM: u32 = 8;

/// Where a fill starts in the stream and how big its grid is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillPlan {
    /// The ChaCha20 block holding the first element.
    pub first_block: u64,
    /// Elements of `first_block` before the first one written (`< epb`).
    pub skip: u32,
    /// ChaCha20 blocks the fill computes.
    pub chacha_blocks: u64,
    /// Grid size (blocks of [`FILL_THREADS`] threads); a grid-stride loop covers the rest.
    pub grid: u32,
}

impl FillPlan {
    /// The plan for `n ≥ 1` elements from element `first`, `epb` (a power of two ≤ 16)
    /// elements per ChaCha block, on a device with `sms` multiprocessors.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `n = 0`; [`Error::SizeOverflow`] when `first + n`
    /// exceeds `u64::MAX` (the CPU's `fill_keyed` rule).
    pub fn new(n: u64, first: u64, epb: u32, sms: u32) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::OutOfRange { name: "len", value: 0.0, allowed: ">= 1" });
        }
        debug_assert!(epb.is_power_of_two() && epb <= 16);
        first.checked_add(n).ok_or(Error::SizeOverflow { what: "first element + length" })?;
        let e = u64::from(epb);
        let skip = (first % e) as u32;
        let chacha_blocks = (n - 1 + u64::from(skip)) / e + 1;
        Ok(FillPlan {
            first_block: first / e,
            skip,
            chacha_blocks,
            grid: grid_for(chacha_blocks, FILL_THREADS, sms),
        })
    }

    /// The plan for `n ≥ 1` raw stream words from word `first_word < 2^68`.
    ///
    /// # Errors
    /// As [`FillPlan::new`]; [`Error::OutOfRange`] when the words run past `2^68`.
    pub fn words(n: u64, first_word: u128, sms: u32) -> Result<Self, Error> {
        const STREAM_WORDS: u128 = 1 << 68;
        if n == 0 {
            return Err(Error::OutOfRange { name: "len", value: 0.0, allowed: ">= 1" });
        }
        if first_word + u128::from(n) > STREAM_WORDS {
            return Err(Error::OutOfRange {
                name: "first_word + len",
                value: (first_word + u128::from(n)) as f64,
                allowed: "<= 2^68",
            });
        }
        let skip = (first_word % 16) as u32;
        let chacha_blocks = (n - 1 + u64::from(skip)) / 16 + 1;
        Ok(FillPlan {
            first_block: (first_word / 16) as u64,
            skip,
            chacha_blocks,
            grid: grid_for(chacha_blocks, FILL_THREADS, sms),
        })
    }
}

/// Blocks for `work` items at `threads` per block, capped at [`BLOCKS_PER_SM`] per SM (at
/// least 1, at most `2^31 − 1`): enough to fill the device, with a grid-stride loop beyond.
pub fn grid_for(work: u64, threads: u32, sms: u32) -> u32 {
    let needed = work.div_ceil(u64::from(threads.max(1))).max(1);
    let mut cap = u64::from(sms.max(1)) * u64::from(BLOCKS_PER_SM);
    let test_cap = GRID_CAP.load(std::sync::atomic::Ordering::Relaxed);
    if test_cap > 0 {
        cap = cap.min(u64::from(test_cap));
    }
    needed.min(cap).min((1u64 << 31) - 1) as u32
}

static GRID_CAP: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Caps every grid at `blocks` (0 removes the cap) so that tests make the kernels' grid-stride
/// loops run many times on small inputs. Results do not depend on the grid (values are keyed
/// by logical index), only the work per block does.
#[doc(hidden)]
pub fn set_grid_cap_for_tests(blocks: u32) {
    GRID_CAP.store(blocks, std::sync::atomic::Ordering::Relaxed);
}

/// Checked shape of a `[rows, dim]` matrix with row stride `ld` in a buffer of `len`
/// elements, whose noise elements are `first .. first + rows·dim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsPlan {
    /// Rows (`batch · tokens`).
    pub rows: u64,
    /// Columns.
    pub dim: u64,
    /// Row stride in elements (`≥ dim`).
    pub ld: u64,
    /// Grid size: one block per row, capped; a grid-stride loop covers the rest.
    pub grid: u32,
}

impl RowsPlan {
    /// Validates the shape against the buffer and the draw's index range.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for zero rows or columns or `ld < dim`;
    /// [`Error::BufferTooShort`] when `(rows − 1)·ld + dim > len`;
    /// [`Error::SizeOverflow`] when sizes overflow or `first + rows·dim > u64::MAX` (the
    /// CPU's rule).
    pub fn new(
        rows: usize,
        dim: usize,
        ld: usize,
        len: usize,
        first: u64,
        sms: u32,
    ) -> Result<Self, Error> {
        if rows == 0 {
            return Err(Error::ShapeMismatch { arg: "x", axis: "rows", expected: 1, got: 0 });
        }
        if dim == 0 {
            return Err(Error::ShapeMismatch { arg: "x", axis: "dim", expected: 1, got: 0 });
        }
        if ld < dim {
            return Err(Error::ShapeMismatch {
                arg: "x",
                axis: "row stride (>= dim)",
                expected: dim,
                got: ld,
            });
        }
        let needed = (rows - 1)
            .checked_mul(ld)
            .and_then(|v| v.checked_add(dim))
            .ok_or(Error::SizeOverflow { what: "x extent" })?;
        if needed > len {
            return Err(Error::BufferTooShort { arg: "x", needed, got: len });
        }
        let elements = (rows as u64)
            .checked_mul(dim as u64)
            .ok_or(Error::SizeOverflow { what: "rows * dim" })?;
        first
            .checked_add(elements)
            .ok_or(Error::SizeOverflow { what: "first element + rows * dim" })?;
        Ok(RowsPlan {
            rows: rows as u64,
            dim: dim as u64,
            ld: ld as u64,
            grid: grid_for(rows as u64, 1, sms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Independent check: enumerate elements and the blocks they live in.
    fn brute(n: u64, first: u64, epb: u64) -> (u64, u32, u64) {
        let blocks: std::collections::BTreeSet<u64> = (first..first + n).map(|e| e / epb).collect();
        let fb = *blocks.first().unwrap();
        (fb, (first - fb * epb) as u32, blocks.len() as u64)
    }

    #[test]
    fn fill_plans_cover_exactly_the_blocks_of_the_elements() {
        for epb in [8u32, 16] {
            for first in [0u64, 1, 7, 8, 15, 16, 17, 1000, 12345] {
                for n in [1u64, 2, 7, 8, 9, 15, 16, 17, 33, 257, 4096, 4097] {
                    let p = FillPlan::new(n, first, epb, 132).unwrap();
                    assert_eq!(
                        (p.first_block, p.skip, p.chacha_blocks),
                        brute(n, first, u64::from(epb)),
                        "n={n} first={first} epb={epb}"
                    );
                    // The kernel's rule: slot s of the fill is output s − skip, s in [skip, skip + n).
                    assert!(p.chacha_blocks * u64::from(epb) >= n + u64::from(p.skip));
                    assert!((p.chacha_blocks - 1) * u64::from(epb) < n + u64::from(p.skip));
                }
            }
        }
    }

    #[test]
    fn fill_plans_at_the_end_of_the_index_space() {
        // As on the CPU, first + n must not exceed u64::MAX.
        let p = FillPlan::new(15, u64::MAX - 15, 16, 1).unwrap();
        assert_eq!((p.first_block, p.skip, p.chacha_blocks), (u64::MAX / 16, 0, 1));
        assert!(matches!(FillPlan::new(16, u64::MAX - 15, 16, 1), Err(Error::SizeOverflow { .. })));
        assert!(matches!(FillPlan::new(0, 0, 16, 1), Err(Error::OutOfRange { .. })));
        assert!(FillPlan::new(1, u64::MAX - 1, 8, 1).is_ok());
        assert!(FillPlan::new(1, u64::MAX, 8, 1).is_err());
    }

    #[test]
    fn word_plans_and_the_stream_end() {
        let p = FillPlan::words(20, 30, 4).unwrap();
        assert_eq!((p.first_block, p.skip, p.chacha_blocks), (1, 14, 3));
        let end = 1u128 << 68;
        assert!(FillPlan::words(16, end - 16, 4).is_ok());
        assert!(matches!(FillPlan::words(17, end - 16, 4), Err(Error::OutOfRange { .. })));
        assert_eq!(FillPlan::words(16, end - 16, 4).unwrap().first_block, u64::MAX);
    }

    #[test]
    fn grids_fill_the_device_and_stay_in_range() {
        assert_eq!(grid_for(1, 256, 132), 1);
        assert_eq!(grid_for(256, 256, 132), 1);
        assert_eq!(grid_for(257, 256, 132), 2);
        assert_eq!(grid_for(u64::MAX, 256, 132), 132 * BLOCKS_PER_SM);
        assert_eq!(grid_for(u64::MAX, 1, u32::MAX), (1 << 31) - 1);
        assert_eq!(grid_for(0, 256, 0), 1);
    }

    #[test]
    fn rows_plans_check_shape_buffer_and_index_range() {
        let p = RowsPlan::new(3, 4, 6, 16, 0, 132).unwrap();
        assert_eq!((p.rows, p.dim, p.ld, p.grid), (3, 4, 6, 3));
        assert!(matches!(
            RowsPlan::new(3, 4, 6, 15, 0, 132),
            Err(Error::BufferTooShort { needed: 16, got: 15, .. })
        ));
        assert!(matches!(
            RowsPlan::new(0, 4, 4, 16, 0, 1),
            Err(Error::ShapeMismatch { axis: "rows", .. })
        ));
        assert!(matches!(
            RowsPlan::new(1, 0, 4, 16, 0, 1),
            Err(Error::ShapeMismatch { axis: "dim", .. })
        ));
        assert!(matches!(RowsPlan::new(2, 4, 3, 16, 0, 1), Err(Error::ShapeMismatch { .. })));
        assert!(matches!(
            RowsPlan::new(usize::MAX, 2, 2, usize::MAX, 0, 1),
            Err(Error::SizeOverflow { .. })
        ));
        assert!(matches!(
            RowsPlan::new(2, 4, 4, 8, u64::MAX - 7, 1),
            Err(Error::SizeOverflow { .. })
        ));
        assert!(RowsPlan::new(2, 4, 4, 8, u64::MAX - 8, 1).is_ok());
        assert_eq!(RowsPlan::new(10_000, 4, 4, 40_000, 0, 10).unwrap().grid, 10 * BLOCKS_PER_SM);
    }
}
