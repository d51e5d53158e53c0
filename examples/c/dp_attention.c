/*
 * dpattn from C: draw keyed Gaussian inputs, run exact attention with caller scratch and
 * check it against a small double-precision reference, calibrate a Gaussian mechanism,
 * then release differentially private attention the safe way: a budget ledger for the
 * mechanism's privacy unit and a session whose master key comes from the operating system.
 * Exit status 0 when every check passes.
 *
 * Build (see examples/Makefile and examples/CMakeLists.txt):
 *   cc -std=c99 -I<prefix>/include dp_attention.c -L<prefix>/lib -ldpattn_ffi -lm
 */
#include <dpattn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 2
#define H 4
#define S 16
#define D 32

static int fail(const char *what, dpattn_status st) {
    char msg[512];
    dpattn_last_error_message(msg, sizeof msg);
    fprintf(stderr, "%s failed: %s (%u): %s\n", what, dpattn_status_str(st), (unsigned)st, msg);
    return 1;
}

/* out[i] = softmax(QK^T / sqrt(D)) V for one head, in double. */
static void reference_head(const float *q, const float *k, const float *v, double *out) {
    for (int i = 0; i < S; i++) {
        double logits[S], max = -INFINITY, sum = 0.0;
        for (int j = 0; j < S; j++) {
            double dot = 0.0;
            for (int c = 0; c < D; c++) dot += (double)q[i * D + c] * (double)k[j * D + c];
            logits[j] = dot / sqrt((double)D);
            if (logits[j] > max) max = logits[j];
        }
        for (int j = 0; j < S; j++) sum += (logits[j] = exp(logits[j] - max));
        for (int c = 0; c < D; c++) {
            double acc = 0.0;
            for (int j = 0; j < S; j++) acc += logits[j] / sum * (double)v[j * D + c];
            out[i * D + c] = acc;
        }
    }
}

int main(void) {
    enum { N = B * H * S * D };
    static float q[N], k[N], v[N], out[N];
    dpattn_status st;

    if (strcmp(dpattn_version(), DPATTN_VERSION) != 0) {
        fprintf(stderr, "header %s but library %s\n", DPATTN_VERSION, dpattn_version());
        return 1;
    }

    /* Example inputs from keyed, addressable randomness: streams 1, 2, 3 for q, k, v. This
     * fixed key only makes the example's *inputs* reproducible; DP releases below draw
     * their noise from a session's secret key instead. */
    dpattn_key key;
    for (int i = 0; i < 32; i++) key.bytes[i] = (uint8_t)(i * 7 + 1);
    if ((st = dpattn_fill_gaussian(&key, 1, 0, 1.0, DPATTN_DTYPE_F32, q, N))) return fail("fill q", st);
    if ((st = dpattn_fill_gaussian(&key, 2, 0, 1.0, DPATTN_DTYPE_F32, k, N))) return fail("fill k", st);
    if ((st = dpattn_fill_gaussian(&key, 3, 0, 1.0, DPATTN_DTYPE_F32, v, N))) return fail("fill v", st);

    /* Exact attention with caller-provided scratch (no allocation inside dpattn). */
    size_t scratch_len = 0;
    if ((st = dpattn_attention_scratch_len(D, D, &scratch_len))) return fail("scratch_len", st);
    float *scratch = malloc(scratch_len * sizeof *scratch);
    if (!scratch) return 1;
    dpattn_tensor4 tq = {q, N, DPATTN_DTYPE_F32, {B, H, S, D}, {H * S * D, S * D, D, 1}};
    dpattn_tensor4 tk = tq, tv = tq;
    tk.data = k;
    tv.data = v;
    dpattn_tensor4_mut tout = {out, N, DPATTN_DTYPE_F32, {B, H, S, D}, {H * S * D, S * D, D, 1}};
    st = dpattn_attention(&tout, &tq, &tk, &tv, NULL, scratch, scratch_len);
    if (st) return fail("attention", st);

    /* Compare with the double reference: f32 accumulation over D = 32 terms stays far
     * below 1e-4 absolute for unit-variance inputs. */
    double worst = 0.0;
    static double ref[S * D];
    for (int h = 0; h < B * H; h++) {
        size_t off = (size_t)h * S * D;
        reference_head(q + off, k + off, v + off, ref);
        for (int i = 0; i < S * D; i++) {
            double e = fabs((double)out[off + i] - ref[i]);
            if (e > worst) worst = e;
        }
    }
    printf("attention: %d heads, max |out - reference| = %.3g\n", B * H, worst);
    if (!(worst < 1e-4)) return 1;

    /* Bad input comes back as a status code and a message, never a crash. */
    st = dpattn_attention(&tout, &tq, &tk, &tv, NULL, scratch, scratch_len - 1);
    if (st != DPATTN_STATUS_SCRATCH_TOO_SMALL) return 1;
    q[5] = NAN;
    st = dpattn_attention(&tout, &tq, &tk, &tv, NULL, scratch, scratch_len);
    if (st != DPATTN_STATUS_NON_FINITE) return 1;
    char msg[256];
    dpattn_last_error_message(msg, sizeof msg);
    printf("NaN input rejected: %s\n", msg);
    free(scratch);

    /* Calibrate a Gaussian mechanism and keep an (epsilon, delta) ledger. */
    double sigma = 0.0;
    if ((st = dpattn_analytic_gaussian_sigma(1.0, 1e-5, 1.0, &sigma))) return fail("calibrate", st);
    printf("analytic Gaussian sigma for (1, 1e-5), sensitivity 1: %.6f\n", sigma);
    if (!(sigma > 3.0 && sigma < 4.0)) return 1; /* Balle & Wang 2018: 3.73 */

    /* DP attention, the safe route. Output perturbation protects one token's key and value
     * rows, so the ledger is kept for one token; the session draws every release's noise
     * from a master key of the operating system at fresh stream ids (never the same noise
     * twice) and charges the ledger. Total budget (2, 1e-5): two (1, 1e-6) releases fit. */
    const dpattn_privacy_unit token = {DPATTN_UNIT_TOKENS, 1};
    dpattn_ledger *ledger = NULL;
    dpattn_session *session = NULL;
    if ((st = dpattn_ledger_new_approx(token, 2.0, 1e-5, &ledger))) return fail("ledger", st);
    if ((st = dpattn_session_new(ledger, &session))) return fail("session", st);
    q[5] = 0.5f; /* back to finite public queries */
    dpattn_output_perturbation_params p;
    dpattn_output_perturbation_params_default(&p);
    p.key_norm = 8.0; /* public bounds: rows beyond them are clamped */
    p.value_norm = 8.0;
    p.epsilon = 1.0;
    p.delta = 1e-6;
    size_t op_len = 0;
    if ((st = dpattn_output_perturbation_scratch_len(D, D, &op_len))) return fail("scratch_len", st);
    float *op_scratch = malloc(op_len * sizeof *op_scratch);
    if (!op_scratch) return 1;
    double noise[B * H];
    for (int r = 0; r < 3; r++) {
        uint64_t epoch = 0, stream = 0;
        /* Log the position with the release: with the master key, an auditor replays it
         * (dpattn_session_new_for_replay). The position is public; the key is not. */
        dpattn_session_position(session, &epoch, &stream);
        st = dpattn_output_perturbation_attention(&tout, &tq, &tk, &tv, &p, session, noise, B * H,
                                                  op_scratch, op_len);
        if (r < 2) {
            if (st) return fail("output perturbation", st);
            printf("release %d (stream id %llu): noise scale %.4g\n", r, (unsigned long long)stream,
                   noise[0]);
            if (!(noise[0] > 0.0) || !isfinite(out[0])) return 1;
        } else {
            printf("third release over budget: %s\n", dpattn_status_str(st));
            if (st != DPATTN_STATUS_INFEASIBLE) return 1;
        }
    }
    uint64_t charges = 0;
    dpattn_ledger_charges(ledger, &charges);
    if (charges != 2) return 1;
    /* A ledger kept for one token refuses a charge about another unit. */
    const dpattn_privacy_unit prompt = {DPATTN_UNIT_PROMPT, 0};
    st = dpattn_ledger_charge_approx(ledger, prompt, 0.1, 0.0);
    printf("charge for another unit: %s\n", dpattn_status_str(st));
    if (st != DPATTN_STATUS_UNIT_MISMATCH) return 1;
    free(op_scratch);
    dpattn_session_free(session);
    dpattn_ledger_free(ledger);
    /* A freed handle is detected, not undefined behaviour. */
    if (dpattn_ledger_charge_approx(ledger, token, 0.1, 0.0) != DPATTN_STATUS_INVALID_HANDLE) return 1;

    printf("C example: all checks passed\n");
    return 0;
}
