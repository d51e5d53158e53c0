//! GPU tests of the fused noisy attention against the CPU (dpattn-core).
//!
//! Ignored unless asked for (`scripts/gpu-test.sh` runs them with `--ignored` on a CUDA
//! machine, where a missing GPU is a failure, not a skip). Expected values: the `f64` CPU
//! oracle `noisy_attention_f64` on the same (16-bit-rounded) inputs, key and streams, and
//! the CPU Gaussian sampler for the noise alone. Tolerances: the largest error relative to
//! the largest reference magnitude, ≤ 1e-5 for `f32`, ≤ 1e-2 for bf16/f16 (the issue's).

use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use std::sync::Arc;

use dpattn_core::attention::attention_scratch_len;
use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn_core::{BatchedMut, BatchedRef, NoiseMode, Scale, ScoreFn};
use dpattn_cuda::attention::{AttnDtype, GpuTensor, noisy_attention_raw};
use dpattn_cuda::{Device, DeviceBuffer, Stream};

fn gpu() -> (Arc<Device>, Stream) {
    let dev = Device::get(0)
        .unwrap_or_else(|e| panic!("GPU test on a machine without a usable GPU: {e}"));
    let stream = dev.new_stream().unwrap();
    (dev, stream)
}

#[path = "support/attention.rs"]
mod support;
use support::{Case, case, check_case, data, decode, encode, permute};

/// Runs the GPU kernel (contiguous operands, or q/k/v/out in PyTorch's `[B, S, H, D]`
/// memory when `bshd`) and returns the output as `[b, h, s_q, d]` values.
fn run_gpu(c: &Case, q: &[u8], k: &[u8], v: &[u8], key: &NoiseKey, bshd: bool) -> Vec<f64> {
    let (dev, s) = gpu();
    let [b, h, sq, d] = c.shape;
    let size = c.dtype.size();
    let up = |x: &[u8]| s.clone_htod(x).unwrap();
    let (qd, kd, vd): (DeviceBuffer<u8>, DeviceBuffer<u8>, DeviceBuffer<u8>) =
        (up(q), up(k), up(v));
    // All-ones bytes are NaN in every dtype: an element the kernel does not write shows.
    let mut od = up(&vec![0xffu8; b * h * sq * d * size]);
    let tensor = |ptr: u64, seq: usize| support::tensor(c, ptr, seq, bshd);
    let (params, spec) = (support::params_of(c), support::spec_of(c, key));
    {
        let (qp, _a) = qd.device_ptr(&s);
        let (kp, _b) = kd.device_ptr(&s);
        let (vp, _c) = vd.device_ptr(&s);
        let (op, _d) = od.device_ptr_mut(&s);
        // SAFETY: each tensor describes a live buffer of b·h·seq·d elements of the dtype.
        unsafe {
            noisy_attention_raw(
                &dev,
                &s,
                c.dtype,
                tensor(op, sq),
                tensor(qp, sq),
                tensor(kp, c.s_k),
                tensor(vp, c.s_k),
                &params,
                Some(&spec),
            )
        }
        .unwrap();
    }
    let raw = decode(&s.clone_dtoh(&od).unwrap(), c.dtype);
    if bshd { permute(&raw, [b, h, sq, d], false) } else { raw }
}

fn check(c: Case, seed: u64) {
    check_case(c, seed, &run_gpu, true);
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn noise_off_matches_the_f64_reference() {
    for (c, seed) in support::noise_off_cases() {
        check(c, seed);
    }
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn cosh_score_matches_the_f64_reference() {
    for (c, seed) in support::cosh_cases() {
        check(c, seed);
    }
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn noise_on_matches_the_cpu_noisy_attention() {
    for (c, seed) in support::noise_on_cases() {
        check(c, seed);
    }
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn output_noise_is_the_cpu_draw_bit_for_bit() {
    // V = 0 makes the attention exactly 0, so the output is the noise alone: element
    // ((b·H + h)·S_q + i)·D + c of Gaussian(σ_h), rounded to f32 (then to the dtype).
    let (b, h, sq, sk) = (2, 3, 45, 17);
    let sigma = [0.5, 1.0, 2.0];
    let key = NoiseKey::for_replay([42; 32]);
    for dtype in AttnDtype::ALL {
        for d in [64, 128] {
            let n = b * h * sq * d;
            let (_, qb) = encode(&data(n, 9), dtype);
            let (_, kb) = encode(&data(b * h * sk * d, 10), dtype);
            let (_, vb) = encode(&vec![0.0; b * h * sk * d], dtype);
            let mut c = case(dtype, [b, h, sq, d], sk, false);
            c.out_sigma = Some(sigma.to_vec());
            let got = run_gpu(&c, &qb, &kb, &vb, &key, false);
            let draw = KeyedStream::new(&key, 11);
            for (e, g) in got.iter().enumerate() {
                let head = (e / (sq * d)) % h;
                let z =
                    Gaussian::new(sigma[head]).unwrap().sample_at::<f64>(&draw, e as u64).unwrap();
                let z32 = z as f32;
                let want = match dtype {
                    AttnDtype::F32 => z32 as f64,
                    AttnDtype::Bf16 => half::bf16::from_f32(z32).to_f64(),
                    AttnDtype::F16 => half::f16::from_f32(z32).to_f64(),
                };
                assert_eq!(g.to_bits(), want.to_bits(), "{dtype:?} d={d} element {e}");
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn output_perturbation_equals_the_cpu_release() {
    use dpattn_core::output_perturbation::{
        OutputPerturbationParams, output_perturbation_attention_keyed,
    };
    use dpattn_core::session::Draw;
    use dpattn_core::{Kernel, PrivacyBudget};
    use dpattn_cuda::output_perturbation::{
        output_perturbation_attention_raw_keyed, workspace_len,
    };
    let (dev, s) = gpu();
    let (b, h, sq, sk, d) = (2, 2, 33, 200, 64);
    let key = NoiseKey::for_replay([0x77; 32]);
    // Keys and values far outside the bounds, so the clamp matters; one value row is NaN.
    let q: Vec<f32> = data(b * h * sq * d, 21);
    let k: Vec<f32> = data(b * h * sk * d, 22).iter().map(|x| x * 3.0).collect();
    let mut v: Vec<f32> = data(b * h * sk * d, 23).iter().map(|x| x * 5.0).collect();
    v[7 * d + 3] = f32::NAN;
    let params = OutputPerturbationParams {
        key_norm: 1.5,
        value_norm: 2.0,
        budget: PrivacyBudget::new(1.0, 1e-6).unwrap(),
        scale: Scale::InvSqrtDim,
        score: ScoreFn::Exp,
        key_padding: None,
        kernel: Kernel::Auto,
        // The GPU kernel adds float noise: compare with the CPU's float path.
        noise_mode: NoiseMode::UnsafeFloat,
    };
    let mut want = vec![0f32; b * h * sq * d];
    let mut sigma_cpu = vec![0.0; b * h];
    output_perturbation_attention_keyed(
        BatchedMut::contiguous(&mut want, [b, h, sq, d]).unwrap(),
        BatchedRef::contiguous(&q, [b, h, sq, d]).unwrap(),
        BatchedRef::contiguous(&k, [b, h, sk, d]).unwrap(),
        BatchedRef::contiguous(&v, [b, h, sk, d]).unwrap(),
        &params,
        Draw { key: &key, stream: 3 },
        None,
        &mut sigma_cpu,
        &mut vec![0.0; attention_scratch_len(d, d).unwrap()],
    )
    .unwrap();
    let up = |x: &[f32]| s.clone_htod(x).unwrap();
    let (qd, kd, vd) = (up(&q), up(&k), up(&v));
    let mut od = s.alloc_zeros::<f32>(want.len()).unwrap();
    let ws_len = workspace_len(AttnDtype::F32, [b, h, sk, d]).unwrap();
    let mut ws = s.alloc_zeros::<u8>(ws_len).unwrap();
    let mut sigma_gpu = vec![0.0; b * h];
    {
        let (qp, _a) = qd.device_ptr(&s);
        let (kp, _b) = kd.device_ptr(&s);
        let (vp, _c) = vd.device_ptr(&s);
        let (op, _d) = od.device_ptr_mut(&s);
        let (wp, _e) = ws.device_ptr_mut(&s);
        let t = |p, seq| GpuTensor::contiguous(p, [b, h, seq, d]).unwrap();
        // SAFETY: live buffers of the stated shapes; the workspace has ws_len bytes.
        unsafe {
            output_perturbation_attention_raw_keyed(
                &dev,
                &s,
                AttnDtype::F32,
                t(op, sq),
                t(qp, sq),
                t(kp, sk),
                t(vp, sk),
                &params,
                Draw { key: &key, stream: 3 },
                None,
                &mut sigma_gpu,
                wp,
                ws_len,
            )
        }
        .unwrap();
    }
    assert_eq!(sigma_gpu, sigma_cpu, "the calibration is the CPU's");
    let got = s.clone_dtoh(&od).unwrap();
    let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let err = got.iter().zip(&want).fold(0.0f32, |m, (g, w)| m.max((g - w).abs())) / scale;
    assert!(err <= 1e-5, "relative error {err:e}");
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn output_perturbation_exact_release_is_on_the_grid_with_the_cpus_integers() {
    use dpattn_core::accounting::ledger::Ledger;
    use dpattn_core::attention::{AttentionParams, attention_f64};
    use dpattn_core::grid_release::GridFormat;
    use dpattn_core::output_perturbation::{
        OutputPerturbationParams, output_perturbation_calibrate_exact, output_perturbation_grid,
    };
    use dpattn_core::sampling::ExactSampler;
    use dpattn_core::session::{NoiseSource, Session};
    use dpattn_core::{Kernel, PrivacyBudget};
    use dpattn_cuda::output_perturbation::{
        GPU_F64, exact_workspace_len, output_perturbation_attention_raw,
    };
    let (dev, s) = gpu();
    let (b, h, sq, sk, d) = (2, 2, 33, 200, 64);
    let key = NoiseKey::for_replay([0x78; 32]);
    // Key and value rows inside their balls (the device clamp copies them exactly), one
    // value row holding NaN (clamped to the zero row on the device, zero in the reference).
    let in_ball = |x: Vec<f32>, r: f32| -> Vec<f32> {
        x.chunks(d)
            .flat_map(|row| {
                let n = row.iter().map(|v| v * v).sum::<f32>().sqrt();
                let f = 0.99 * r / n.max(r);
                row.iter().map(move |v| v * f).collect::<Vec<_>>()
            })
            .collect()
    };
    let q: Vec<f32> = data(b * h * sq * d, 31);
    let k = in_ball(data(b * h * sk * d, 32), 1.5);
    let mut v = in_ball(data(b * h * sk * d, 33), 2.0);
    let mut v_ref = v.clone();
    v[7 * d + 3] = f32::NAN;
    v_ref[7 * d..8 * d].fill(0.0);
    let params = OutputPerturbationParams {
        key_norm: 1.5,
        value_norm: 2.0,
        budget: PrivacyBudget::new(1.0, 1e-6).unwrap(),
        scale: Scale::InvSqrtDim,
        score: ScoreFn::Exp,
        key_padding: None,
        kernel: Kernel::Auto,
        noise_mode: NoiseMode::Exact,
    };
    // The CPU's calibration for the GPU kernel's error model, and the CPU's f64 attention
    // of the same rows: the expected release rounds it to those grids with the CPU's
    // integers.
    let qv = BatchedRef::contiguous(&q, [b, h, sq, d]).unwrap();
    let mut sigma_cpu = vec![0.0; b * h];
    output_perturbation_calibrate_exact(
        qv,
        &params,
        sk,
        d,
        &GPU_F64,
        GridFormat::F32,
        &mut sigma_cpu,
    )
    .unwrap();
    let grids: Vec<_> = (0..b)
        .map(|bi| {
            output_perturbation_grid(qv, &params, sk, d, &GPU_F64, GridFormat::F32, bi)
                .unwrap()
                .unwrap()
        })
        .collect();
    let mut noiseless = vec![0f64; b * h * sq * d];
    attention_f64(
        BatchedMut::contiguous(&mut noiseless, [b, h, sq, d]).unwrap(),
        qv,
        BatchedRef::contiguous(&k, [b, h, sk, d]).unwrap(),
        BatchedRef::contiguous(&v_ref, [b, h, sk, d]).unwrap(),
        &AttentionParams { scale: Scale::InvSqrtDim, ..AttentionParams::default() },
        &mut vec![0.0; attention_scratch_len(d, d).unwrap()],
    )
    .unwrap();
    let up = |x: &[f32]| s.clone_htod(x).unwrap();
    let (qd, kd, vd) = (up(&q), up(&k), up(&v));
    let mut od = s.alloc_zeros::<f32>(b * h * sq * d).unwrap();
    let ws_len = exact_workspace_len([b, h, sk, d], [b, h, sq, d]).unwrap();
    let mut ws = s.alloc_zeros::<u8>(ws_len).unwrap();
    let mut sigma_gpu = vec![0.0; b * h];
    // The default API: a session (here replaying master key 0x78 at epoch 9 from stream 3,
    // so the expected noise can be recomputed from its draw).
    let ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-5).unwrap());
    let mut session = Session::with_source(NoiseSource::for_replay(key.clone(), 9, 3), ledger);
    let epoch_key = dpattn_core::session::epoch_key(&key, 9);
    {
        let (qp, _a) = qd.device_ptr(&s);
        let (kp, _b) = kd.device_ptr(&s);
        let (vp, _c) = vd.device_ptr(&s);
        let (op, _d) = od.device_ptr_mut(&s);
        let (wp, _e) = ws.device_ptr_mut(&s);
        let t = |p, seq| GpuTensor::contiguous(p, [b, h, seq, d]).unwrap();
        // SAFETY: live buffers of the stated shapes; the workspace has ws_len bytes.
        unsafe {
            output_perturbation_attention_raw(
                &dev,
                &s,
                AttnDtype::F32,
                t(op, sq),
                t(qp, sq),
                t(kp, sk),
                t(vp, sk),
                &params,
                &mut session,
                &mut sigma_gpu,
                wp,
                ws_len,
            )
        }
        .unwrap();
    }
    assert_eq!(sigma_gpu, sigma_cpu, "the calibration is the CPU's for the GPU model");
    assert_eq!((session.ledger().charges(), session.ledger().unsafe_float_charges()), (1, 0));
    assert_eq!(session.next_stream(), 4);
    let st = s.clone_dtoh(&ws).unwrap();
    let status: Vec<u64> =
        st[ws_len - 16..].chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(status, [0, u64::MAX]);
    let got = s.clone_dtoh(&od).unwrap();
    let draw = KeyedStream::new(&epoch_key, 3);
    let mut same = 0;
    for (e, (&g, &x)) in got.iter().zip(&noiseless).enumerate() {
        let grid = &grids[e / (h * sq * d)];
        let z = grid.integer_noise().sample_at(&draw, e as u64).unwrap();
        let want = grid.grid().release(x, z);
        let g = f64::from(g);
        assert!((g / grid.resolution()).fract() == 0.0, "element {e} is off the grid");
        // The GPU's and the CPU's f64 attentions differ far below Λ: the same grid index
        // except where they straddle a rounding boundary.
        assert!((g - want).abs() <= grid.resolution(), "element {e}: {g:e} vs {want:e}");
        same += usize::from(g == want);
    }
    assert!(same * 1000 >= 999 * got.len(), "{same} of {} equal", got.len());
    // bf16/f16 inputs are refused in exact mode, before anything is charged or written.
    let e = {
        let (qp, _a) = qd.device_ptr(&s);
        let (op, _d) = od.device_ptr_mut(&s);
        let (wp, _e) = ws.device_ptr_mut(&s);
        let t = |p, seq| GpuTensor::contiguous(p, [b, h, seq, d]).unwrap();
        // SAFETY: refused before any device access.
        unsafe {
            output_perturbation_attention_raw(
                &dev,
                &s,
                AttnDtype::Bf16,
                t(op, sq),
                t(qp, sq),
                t(qp, sk),
                t(qp, sk),
                &params,
                &mut session,
                &mut sigma_gpu,
                wp,
                ws_len,
            )
        }
    };
    assert!(matches!(e, Err(dpattn_cuda::Error::Unsupported { .. })), "{e:?}");
    assert_eq!(session.ledger().charges(), 1);
}
