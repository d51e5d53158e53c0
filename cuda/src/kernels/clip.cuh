// Row clipping rule of DP-Forward (ClipMode::Clip, ClipRegion::Rows): the port of
// `ball_margin` and `block_factor` in core/src/dp_forward/clip.rs.
#pragma once

// 1 − (len + 16)·2^-52: the relative margin kept inside the ball for a block of `len` entries.
DP_FN double dp_ball_margin(u64 len) {
    return 1.0 - ((double)len + 16.0) * dp_bits_f64(0x3cb0000000000000ull);
}

// The factor f such that a row with norm parts (m = max |x|, root = ‖x/m‖) becomes (x/m)·f,
// or a negative value to leave the row alone (inside the ball, or the zero row).
DP_FN double dp_clip_factor(double c, u64 len, double m, double root) {
    if (m == 0.0) return -1.0;
    double keep = c * dp_ball_margin(len);
    double target = c * (2.0 * dp_ball_margin(len) - 1.0);
    bool inside = root <= keep / m;
    return inside ? -1.0 : target / root;
}

// Whether the raw sum of squares is trusted (no overflow or underflow): max |x| in
// [1e-140, 1e140]; otherwise the norm is recomputed on x / max.
DP_FN bool dp_norm_raw_ok(double m) { return m >= 1e-140 && m <= 1e140; }

