//! Attention problems shared by the attention test binaries: a deterministic input
//! generator, the `[batch, heads, seq, dim]` shapes of one problem, and strided layouts.

use dpattn::Layout4;
use dpattn::attention::attention_scratch_len;

/// SplitMix64: deterministic test inputs (not noise; noise comes from the keyed streams).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform on `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform on `[-1, 1)`.
    pub fn uniform(&mut self) -> f64 {
        self.unit() * 2.0 - 1.0
    }

    /// Uniform on `[lo, hi)`.
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A standard normal (Box–Muller on this generator; only for test inputs).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }

    /// A uniformly random unit vector of dimension `d`.
    pub fn direction(&mut self, d: usize) -> Vec<f64> {
        loop {
            let x: Vec<f64> = (0..d).map(|_| self.normal()).collect();
            let n = norm(&x);
            if n > 1e-3 {
                return x.iter().map(|v| v / n).collect();
            }
        }
    }

    /// A random direction with norm uniform in `[0, max_norm)`.
    pub fn vector(&mut self, d: usize, max_norm: f64) -> Vec<f64> {
        let r = self.range(0.0, max_norm);
        self.direction(d).iter().map(|x| x * r).collect()
    }

    /// `n` values uniform on `[-amp, amp)`, rounded to `f32`.
    pub fn vec_f32(&mut self, n: usize, amp: f64) -> Vec<f32> {
        (0..n).map(|_| (self.uniform() * amp) as f32).collect()
    }

    /// `n` integers uniform in `[-m, m]`, as `f32`.
    pub fn ints_f32(&mut self, n: usize, m: u64) -> Vec<f32> {
        (0..n).map(|_| (self.next_u64() % (2 * m + 1)) as f32 - m as f32).collect()
    }

    /// A key-padding mask `[batch, s_k]` keeping each key with probability 3/4.
    pub fn padding(&mut self, batch: usize, s_k: usize) -> Vec<bool> {
        (0..batch * s_k).map(|_| !self.next_u64().is_multiple_of(4)).collect()
    }
}

/// The L2 norm.
pub fn norm(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// `q [b, h, sq, d]`, `k [b, h, sk, d]`, `v [b, h, sk, dv]`, `out [b, h, sq, dv]`.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub b: usize,
    pub h: usize,
    pub sq: usize,
    pub sk: usize,
    pub d: usize,
    pub dv: usize,
}

pub const fn shape(b: usize, h: usize, sq: usize, sk: usize, d: usize, dv: usize) -> Shape {
    Shape { b, h, sq, sk, d, dv }
}

impl Shape {
    pub fn q(self) -> [usize; 4] {
        [self.b, self.h, self.sq, self.d]
    }
    pub fn k(self) -> [usize; 4] {
        [self.b, self.h, self.sk, self.d]
    }
    pub fn v(self) -> [usize; 4] {
        [self.b, self.h, self.sk, self.dv]
    }
    pub fn o(self) -> [usize; 4] {
        [self.b, self.h, self.sq, self.dv]
    }
    pub fn out_len(self) -> usize {
        self.b * self.h * self.sq * self.dv
    }
    pub fn scratch(self) -> usize {
        attention_scratch_len(self.d, self.dv).unwrap()
    }
    /// `(b, h)` of the contiguous output element `idx`.
    pub fn head_of(self, idx: usize) -> (usize, usize) {
        let flat = idx / (self.sq * self.dv);
        (flat / self.h, flat % self.h)
    }
}

/// The `[b, s, h, d]` (heads-inner) layout of a logical `[b, h, s, d]` shape.
pub fn bshd(shape: [usize; 4]) -> Layout4 {
    let [_, h, s, d] = shape;
    Layout4::new(shape, [s * h * d, d, h * d, 1]).unwrap()
}

/// `x` (contiguous, logical order) written into a `layout` buffer whose other elements are
/// `fill`.
pub fn scatter<T: Copy>(x: &[T], layout: &Layout4, fill: T) -> Vec<T> {
    let [nb, nh, ns, nd] = layout.shape();
    let mut buf = vec![fill; layout.required_len()];
    for b in 0..nb {
        for h in 0..nh {
            for s in 0..ns {
                for c in 0..nd {
                    buf[layout.offset(b, h, s, c)] = x[layout.logical_index(b, h, s, c) as usize];
                }
            }
        }
    }
    buf
}
