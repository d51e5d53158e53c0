//! GPU tests of the Gaussian-sampling DP attention kernels (paper 000, factor-free sampler
//! with clip-and-ridge) against the CPU release of dpattn-core.
//!
//! Ignored unless asked for (`scripts/gpu-test.sh` runs them with `--ignored` on a CUDA
//! machine, where a missing GPU is a failure, not a skip). The expected values and the
//! tolerances are in `support/gaussian_sampling.rs` (bit-identical with one chunk, the
//! reassociation bound otherwise); `tests/cuda-host` runs the same comparisons on a host
//! emulation of the kernels on every machine.

#[path = "support/gaussian_sampling.rs"]
mod support;
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::session::Draw;
use support::{Release, compare, cpu_release, input, key, ledger, params};

use std::sync::Arc;

use dpattn_core::accounting::ledger::Ledger;
use dpattn_core::gaussian_sampling_attention::{
    GaussianSamplingParams, OutOfDomain, Sampler, check_release_parameters,
};
use dpattn_core::sampling::NoiseKey;
use dpattn_core::{Element, Layout4, ScoreFn};
use dpattn_cuda::gaussian_sampling_attention::{
    STATUS_CLEAN, SamplingPlan, gaussian_sampling_attention_keyed, gaussian_sampling_attention_raw,
    gaussian_sampling_attention_workspace_len,
};
use dpattn_cuda::{Device, Error, FloatDtype, FloatElement, Stream};

fn gpu() -> (Arc<Device>, Stream) {
    let dev = Device::get(0)
        .unwrap_or_else(|e| panic!("GPU test on a machine without a usable GPU: {e}"));
    let stream = dev.new_stream().unwrap();
    (dev, stream)
}

#[allow(clippy::too_many_arguments)]
fn gpu_release<T: FloatElement>(
    dev: &Device,
    s: &Stream,
    x: &[T],
    layout: Layout4,
    params: &GaussianSamplingParams,
    key: &NoiseKey,
    stream_id: u64,
    ledger: &mut Ledger,
) -> Release {
    let [batch, heads, n, _] = layout.shape();
    let len = batch * heads * n * n;
    let xd = s.clone_htod(x).unwrap();
    let mut b = s.alloc_zeros::<f64>(len).unwrap();
    let mut p = s.alloc_zeros::<f64>(len).unwrap();
    gaussian_sampling_attention_keyed(
        dev,
        s,
        &mut b,
        &mut p,
        &xd,
        layout,
        params,
        Draw { key, stream: stream_id },
        Some(ledger),
    )
    .unwrap();
    Release { b: s.clone_dtoh(&b).unwrap(), p: s.clone_dtoh(&p).unwrap() }
}

fn check_case<T: FloatElement + Element + From<f32>>(
    dev: &Device,
    s: &Stream,
    shape: [usize; 4],
    k: u64,
    score: ScoreFn,
    interleaved: bool,
) {
    let (x, layout) = input::<T>(shape, interleaved);
    let params = params(k, score);
    let key = key(shape[2] as u8);
    let (mut lc, mut lg) = (ledger(), ledger());
    let cpu = cpu_release(&x, layout, &params, &key, 5, &mut lc);
    let gpu = gpu_release(dev, s, &x, layout, &params, &key, 5, &mut lg);
    let what = format!(
        "{shape:?} k={k} {score:?} {} interleaved={interleaved}",
        std::any::type_name::<T>()
    );
    let worst = compare(&gpu, &cpu, shape, k, &what);
    eprintln!("{what}: largest |ΔB|/√(BiiBjj) = {worst:e}");
    assert_eq!(lg.charges(), 1, "{what}");
    assert_eq!(lg.spent(), lc.spent(), "{what}: the GPU charges what the CPU charges");
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn one_chunk_releases_are_bit_identical_to_the_cpu() {
    let (dev, s) = gpu();
    // n, d, k off every tile size (32 samples, 32 columns), d < n (allowed by the ridge),
    // n at the limit, f32 and f64, exp and cosh, strided and contiguous X.
    check_case::<f64>(&dev, &s, [1, 1, 1, 1], 1, ScoreFn::Exp, false);
    check_case::<f64>(&dev, &s, [2, 3, 5, 40], 300, ScoreFn::Cosh, true);
    check_case::<f32>(&dev, &s, [1, 2, 33, 70], 512, ScoreFn::Exp, true);
    check_case::<f64>(&dev, &s, [1, 1, 64, 33], 200, ScoreFn::Cosh, false);
    check_case::<f32>(&dev, &s, [3, 1, 9, 4], 97, ScoreFn::Exp, false);
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn chunked_releases_match_the_cpu_within_the_reassociation_bound() {
    let (dev, s) = gpu();
    check_case::<f64>(&dev, &s, [1, 2, 9, 4], 3000, ScoreFn::Exp, true);
    check_case::<f32>(&dev, &s, [2, 1, 17, 45], 20_000, ScoreFn::Cosh, false);
    check_case::<f64>(&dev, &s, [1, 1, 64, 65], 513, ScoreFn::Exp, false);
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn large_k_release_matches_the_cpu() {
    let (dev, s) = gpu();
    // k = 10^5: 128 chunks of 782 samples; 40 problems at 32 per launch make two launches.
    check_case::<f32>(&dev, &s, [1, 1, 64, 100], 100_000, ScoreFn::Exp, false);
    check_case::<f64>(&dev, &s, [5, 8, 6, 37], 100_000, ScoreFn::Cosh, true);
    assert_eq!(SamplingPlan::new([5, 8, 6, 37], 100_000).unwrap().group, 32);
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn bits_do_not_depend_on_the_grid_and_repeat_exactly() {
    let (dev, s) = gpu();
    let shape = [2, 2, 11, 300];
    let (x, layout) = input::<f64>(shape, false);
    let params = params(5000, ScoreFn::Exp);
    let first = gpu_release(&dev, &s, &x, layout, &params, &key(9), 1, &mut ledger());
    // One block for the grid-stride factor kernel: same bits.
    dpattn_cuda::launch::set_grid_cap_for_tests(1);
    let capped = gpu_release(&dev, &s, &x, layout, &params, &key(9), 1, &mut ledger());
    dpattn_cuda::launch::set_grid_cap_for_tests(0);
    let again = gpu_release(&dev, &s, &x, layout, &params, &key(9), 1, &mut ledger());
    for other in [&capped, &again] {
        assert!(first.b.iter().zip(&other.b).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(first.p.iter().zip(&other.p).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
    // Another stream id is another release.
    let other = gpu_release(&dev, &s, &x, layout, &params, &key(9), 2, &mut ledger());
    assert!(first.b.iter().zip(&other.b).any(|(a, b)| a != b));
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn raw_entry_point_runs_on_caller_memory_and_a_borrowed_stream() {
    let (dev, s) = gpu();
    let shape = [1, 3, 7, 50];
    let [batch, heads, n, _] = shape;
    let (x, layout) = input::<f32>(shape, true);
    let params = params(2000, ScoreFn::Cosh);
    let typed = gpu_release(&dev, &s, &x, layout, &params, &key(4), 3, &mut ledger());

    let owner = dev.new_stream().unwrap();
    // SAFETY: `owner` is a live stream of this device's primary context and outlives `borrowed`.
    let borrowed = unsafe { dev.borrow_stream(owner.as_raw()) };
    let len = batch * heads * n * n;
    let ws_len = gaussian_sampling_attention_workspace_len(shape, params.k).unwrap();
    let xd = owner.clone_htod(&x).unwrap();
    let mut b = owner.alloc_zeros::<f64>(len).unwrap();
    let mut p = owner.alloc_zeros::<f64>(len).unwrap();
    let mut ws = owner.alloc_zeros::<f64>(ws_len).unwrap();
    let mut status = owner.alloc_zeros::<u64>(1).unwrap();
    let mut lg = ledger();
    {
        let (xp, _a) = xd.device_ptr(&owner);
        let (bp, _b) = b.device_ptr_mut(&owner);
        let (pp, _c) = p.device_ptr_mut(&owner);
        let (wp, _d) = ws.device_ptr_mut(&owner);
        let (sp, _e) = status.device_ptr_mut(&owner);
        // SAFETY: every pointer addresses a live buffer of the stated length on this device;
        // the guards keep them alive until the work is recorded on `owner`.
        unsafe {
            gaussian_sampling_attention_raw(
                &dev,
                &borrowed,
                bp,
                len,
                pp,
                len,
                xp,
                x.len(),
                FloatDtype::F32,
                layout,
                &params,
                Draw { key: &key(4), stream: 3 },
                Some(&mut lg),
                wp,
                ws_len,
                sp,
            )
        }
        .unwrap();
    }
    owner.synchronize().unwrap();
    assert_eq!(owner.clone_dtoh(&status).unwrap(), vec![STATUS_CLEAN]);
    let (gb, gp) = (owner.clone_dtoh(&b).unwrap(), owner.clone_dtoh(&p).unwrap());
    assert!(typed.b.iter().zip(&gb).all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(typed.p.iter().zip(&gp).all(|(a, b)| a.to_bits() == b.to_bits()));
    let expected = check_release_parameters(&params, shape).unwrap();
    let mut reference = ledger();
    reference
        .try_charge(
            PrivacyUnit::FeatureColumn,
            dpattn_core::accounting::ledger::Charge::Approx(expected),
        )
        .unwrap();
    assert_eq!(lg.spent(), reference.spent());
    drop(borrowed);
    owner.synchronize().unwrap(); // the borrowed wrapper did not destroy the stream
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn a_non_finite_column_is_zeroed_like_the_cpu() {
    // Issue 28: a NaN or ∞ in X was refused (typed) or released as NaN (raw); clip-and-
    // ridge zeroes the column instead, on both entry points, bit for bit as the CPU does.
    let (dev, s) = gpu();
    let shape = [2, 1, 6, 40];
    let len = 2 * 36;
    let (mut x, layout) = input::<f64>(shape, false);
    x[layout.offset(1, 0, 2, 17)] = f64::NAN;
    x[layout.offset(1, 0, 4, 3)] = f64::INFINITY;
    let params = params(100, ScoreFn::Exp);
    let (mut lc, mut lg) = (ledger(), ledger());
    let cpu = cpu_release(&x, layout, &params, &key(1), 0, &mut lc);
    let typed = gpu_release(&dev, &s, &x, layout, &params, &key(1), 0, &mut lg);
    compare(&typed, &cpu, shape, params.k, "typed, non-finite X");
    assert_eq!(lg.spent(), lc.spent());

    // Raw: the same bits, and the status word ends clean.
    let xd = s.clone_htod(&x).unwrap();
    let mut b = s.clone_htod(&vec![7.0f64; len]).unwrap();
    let mut p = s.clone_htod(&vec![7.0f64; len]).unwrap();
    let ws_len = gaussian_sampling_attention_workspace_len(shape, params.k).unwrap();
    let mut ws = s.alloc_zeros::<f64>(ws_len).unwrap();
    let mut status = s.alloc_zeros::<u64>(1).unwrap();
    {
        let (xp, _a) = xd.device_ptr(&s);
        let (bp, _b) = b.device_ptr_mut(&s);
        let (pp, _c) = p.device_ptr_mut(&s);
        let (wp, _d) = ws.device_ptr_mut(&s);
        let (sp, _e) = status.device_ptr_mut(&s);
        // SAFETY: live buffers of the stated lengths on this device.
        unsafe {
            gaussian_sampling_attention_raw(
                &dev,
                &s,
                bp,
                len,
                pp,
                len,
                xp,
                x.len(),
                FloatDtype::F64,
                layout,
                &params,
                Draw { key: &key(1), stream: 0 },
                None,
                wp,
                ws_len,
                sp,
            )
        }
        .unwrap();
    }
    assert_eq!(s.clone_dtoh(&status).unwrap(), vec![STATUS_CLEAN]);
    let raw = Release { b: s.clone_dtoh(&b).unwrap(), p: s.clone_dtoh(&p).unwrap() };
    compare(&raw, &cpu, shape, params.k, "raw, non-finite X");
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn refusals_happen_before_any_launch_and_charge_nothing() {
    let (dev, s) = gpu();
    let shape = [1, 2, 4, 64];
    let (x, layout) = input::<f32>(shape, false);
    let xd = s.clone_htod(&x).unwrap();
    let mut b = s.clone_htod(&vec![7.0f64; 32]).unwrap();
    let mut p = s.clone_htod(&vec![7.0f64; 32]).unwrap();
    let mut short = s.alloc_zeros::<f64>(31).unwrap();
    let mut lg = ledger();
    let mut bartlett = params(1000, ScoreFn::Exp);
    bartlett.sampler = Sampler::Bartlett;
    let mut reject = params(1000, ScoreFn::Exp);
    reject.out_of_domain = OutOfDomain::Reject;
    let infeasible = params(1 << 50, ScoreFn::Exp);
    for (prm, what) in [(&bartlett, "bartlett"), (&reject, "reject"), (&infeasible, "k too large")]
    {
        let e = gaussian_sampling_attention_keyed(
            &dev,
            &s,
            &mut b,
            &mut p,
            &xd,
            layout,
            prm,
            Draw { key: &key(1), stream: 0 },
            Some(&mut lg),
        )
        .unwrap_err();
        match what {
            "k too large" => assert_eq!(
                e,
                Error::Core(check_release_parameters(prm, shape).unwrap_err()),
                "{what}"
            ),
            _ => assert!(matches!(e, Error::Unsupported { .. }), "{what}: {e}"),
        }
    }
    let e = gaussian_sampling_attention_keyed(
        &dev,
        &s,
        &mut short,
        &mut p,
        &xd,
        layout,
        &params(1000, ScoreFn::Exp),
        Draw { key: &key(1), stream: 0 },
        Some(&mut lg),
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Core(dpattn_core::Error::BufferTooShort { arg: "out_b", .. })),
        "{e}"
    );
    let big = Layout4::contiguous([1, 1, 65, 64]).unwrap();
    let xbig = s.alloc_zeros::<f32>(65 * 64).unwrap();
    let e = gaussian_sampling_attention_keyed(
        &dev,
        &s,
        &mut b,
        &mut p,
        &xbig,
        big,
        &params(1000, ScoreFn::Exp),
        Draw { key: &key(1), stream: 0 },
        Some(&mut lg),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert_eq!(lg.charges(), 0);
    assert!(s.clone_dtoh(&b).unwrap().iter().chain(&s.clone_dtoh(&p).unwrap()).all(|v| *v == 7.0));
}
