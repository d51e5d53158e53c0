/*
 * dpattn_cuda_noisy_attention from C99: every argument error, each checked on the host
 * before the device is touched (so the same with or without a GPU), and, without a GPU,
 * CUDA_UNAVAILABLE for valid arguments.
 *
 * No CUDA library is linked, so host buffers stand in for device pointers; every call here
 * must fail before the device is touched, and the buffers are checked untouched at the end.
 * The values computed on a GPU are checked by cuda/tests/gpu_attention.rs against the
 * float64 CPU reference.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define SENTINEL 0xcd
/* One [1, 2, 3, 64] bf16 tensor: 384 elements, 768 bytes. */
#define ELEMS (1 * 2 * 3 * 64)
#define BYTES (ELEMS * 2)

static unsigned char arena[4 * BYTES + 64];

static int untouched(void) {
    size_t i;
    for (i = 0; i < sizeof arena; i++)
        if (arena[i] != SENTINEL) return 0;
    return 1;
}

static dpattn_tensor4 input(const void *data) {
    dpattn_tensor4 t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.len = ELEMS;
    t.dtype = DPATTN_DTYPE_BF16;
    t.shape[0] = 1, t.shape[1] = 2, t.shape[2] = 3, t.shape[3] = 64;
    t.strides[0] = 384, t.strides[1] = 192, t.strides[2] = 64, t.strides[3] = 1;
    return t;
}

static dpattn_tensor4_mut output(void *data) {
    dpattn_tensor4_mut t;
    dpattn_tensor4 in = input(data);
    memset(&t, 0, sizeof t);
    t.data = data;
    t.len = in.len;
    t.dtype = in.dtype;
    memcpy(t.shape, in.shape, sizeof t.shape);
    memcpy(t.strides, in.strides, sizeof t.strides);
    return t;
}

int dpattn_c_cuda_attention(void) {
    unsigned char *base;
    dpattn_tensor4_mut out;
    dpattn_tensor4 q, k, v, t;
    dpattn_attention_options opts;
    dpattn_noise_spec noise;
    double sigma = 0.5, bad_sigma = -1.0, two_sigmas[2] = {0.5, 0.25};
    uint8_t padding[3] = {1, 1, 0};
    uint32_t devices;
    int gpu;
    dpattn_status st;

    memset(arena, SENTINEL, sizeof arena);
    /* 16-byte aligned, four disjoint tensors. */
    base = arena + (16 - (size_t)((uintptr_t)arena % 16)) % 16;
    out = output(base);
    q = input(base + BYTES);
    k = input(base + 2 * BYTES);
    v = input(base + 3 * BYTES);
    gpu = dpattn_cuda_probe(&devices) == DPATTN_STATUS_OK;

    memset(&noise, 0, sizeof noise);
    memset(noise.key.bytes, 9, sizeof noise.key.bytes);
    noise.output_enabled = 1;
    noise.output.stream = 1;
    noise.output.sigma = two_sigmas; /* one sigma per head */
    noise.output.sigma_len = 2;

    /* The device ordinal and NULL tensors. */
    st = dpattn_cuda_noisy_attention(-1, NULL, &out, &q, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("device"));
    st = dpattn_cuda_noisy_attention(0, NULL, NULL, &q, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out"));
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, NULL, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("k"));
    t = q;
    t.data = NULL;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &t, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("q"));

    /* Dtypes: f64 is not a GPU attention type; all four must agree. */
    t = q;
    t.dtype = DPATTN_DTYPE_F64;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &t, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("q"));
    t = v;
    t.dtype = DPATTN_DTYPE_F16;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &t, NULL, &noise);
    CHECK(st == DPATTN_STATUS_UNSUPPORTED && msg_has("v"));

    /* Alignment: a pointer off its element, then rows off 16 bytes. */
    t = k;
    t.data = (const unsigned char *)k.data + 1;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &t, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_MISALIGNED && msg_has("k"));
    t = k;
    t.data = (const unsigned char *)k.data + 8; /* reads into v's bytes: inputs may overlap */
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &t, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_UNSUPPORTED && msg_has("16"));

    /* Shapes: head dims other than 64 and 128, disagreeing axes, zero sizes, a short
     * buffer, a non-unit feature stride, sizes whose product overflows. */
    t = q;
    t.shape[3] = 32, t.strides[0] = 192, t.strides[1] = 96, t.strides[2] = 32;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &t, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_UNSUPPORTED && msg_has("head dimension 32"));
    {
        dpattn_tensor4 q32 = t, k32 = t, v32 = t;
        dpattn_tensor4_mut o32 = out;
        memcpy(o32.shape, t.shape, sizeof t.shape);
        memcpy(o32.strides, t.strides, sizeof t.strides);
        k32.data = k.data, v32.data = v.data;
        st = dpattn_cuda_noisy_attention(0, NULL, &o32, &q32, &k32, &v32, NULL, &noise);
        CHECK(st == DPATTN_STATUS_UNSUPPORTED && msg_has("64") && msg_has("128"));
    }
    t = k;
    t.shape[1] = 1;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &t, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("k"));
    t = q;
    t.shape[2] = 0;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &t, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("s_q"));
    t = v;
    t.len = ELEMS - 1;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &t, NULL, &noise);
    CHECK(st == DPATTN_STATUS_BUFFER_TOO_SHORT && msg_has("v"));
    t = q;
    t.strides[3] = 2;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &t, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("q.strides[3]"));
    t = k;
    t.shape[2] = SIZE_MAX / 2;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &t, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_SIZE_OVERFLOW && msg_has("k: element count"));

    /* out overlapping an input. */
    {
        dpattn_tensor4_mut o = output((void *)(uintptr_t)v.data);
        st = dpattn_cuda_noisy_attention(0, NULL, &o, &q, &k, &v, NULL, &noise);
        CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("`v`") && msg_has("overlap out"));
    }

    /* Options: unknown values, a bad scale, a key-padding mask (not on the GPU). */
    CHECK(dpattn_attention_options_default(&opts) == DPATTN_STATUS_OK);
    opts.score = 7;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, &opts, &noise);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("score"));
    CHECK(dpattn_attention_options_default(&opts) == DPATTN_STATUS_OK);
    opts.causal = 2;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, &opts, &noise);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("causal"));
    CHECK(dpattn_attention_options_default(&opts) == DPATTN_STATUS_OK);
    opts.key_padding = padding;
    opts.key_padding_len = 3;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, &opts, &noise);
    CHECK(st == DPATTN_STATUS_UNSUPPORTED && msg_has("padding"));

    /* Noise: NULL sigma, one sigma for two heads (the table holds heads or batch · heads
     * entries), a negative sigma, equal stream ids, a logit table of the wrong length. */
    noise.output.sigma = NULL;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("noise.output.sigma"));
    noise.output.sigma = &sigma;
    noise.output.sigma_len = 1;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("sigma") && msg_has("= 1, expected 2"));
    two_sigmas[1] = bad_sigma;
    noise.output.sigma = two_sigmas;
    noise.output.sigma_len = 2;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sigma"));
    two_sigmas[1] = 0.25;
    noise.logits_enabled = 1;
    noise.logits = noise.output;
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("stream"));
    noise.logits.stream = 2;
    noise.logits.sigma_len = 3; /* neither heads nor batch · heads (both 2 here) */
    st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, NULL, &noise);
    CHECK(st == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("sigma") && msg_has("= 3, expected 2"));
    noise.logits.sigma_len = 2;

    if (!gpu) {
        /* Valid arguments (per-head sigma on both streams, cosh, causal) without a GPU. */
        CHECK(dpattn_attention_options_default(&opts) == DPATTN_STATUS_OK);
        opts.causal = 1;
        opts.score = DPATTN_SCORE_COSH;
        st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, &opts, &noise);
        CHECK(st == DPATTN_STATUS_CUDA_UNAVAILABLE && msg_has("CUDA unavailable"));
        st = dpattn_cuda_noisy_attention(0, NULL, &out, &q, &k, &v, NULL, NULL);
        CHECK(st == DPATTN_STATUS_CUDA_UNAVAILABLE);
    }
    CHECK(untouched());
    return 0;
}
