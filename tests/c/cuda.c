/*
 * The GPU entry points from C99: the probe, every argument error (checked before the device
 * is touched, so the same with or without a GPU) and, without a GPU, the "CUDA unavailable"
 * status with its reason.
 *
 * This program links no CUDA library, so it cannot allocate device memory: host buffers
 * stand in for device pointers only in calls that must fail before the device is touched
 * (they are never dereferenced; the test checks that they are untouched). On a machine
 * with a GPU the only calls with valid arguments are the probe and a device ordinal past
 * the last device; the values computed on a GPU are checked by the unit tests in
 * ffi/src/cuda.rs against the CPU.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define SENTINEL 0xab

static int untouched(const void *p, size_t bytes) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < bytes; i++)
        if (b[i] != SENTINEL) return 0;
    return 1;
}

/* The message of the last failure names why CUDA cannot run. */
static int says_why(void) {
    return msg_has("CUDA unavailable: ") &&
           (msg_has("libcuda") || msg_has("libnvrtc") || msg_has("no device") || msg_has("driver") ||
            msg_has("probe"));
}

int dpattn_c_cuda(void) {
    dpattn_key key;
    double buf[8];    /* stands in for device memory: 8-byte aligned, 64 bytes */
    uint32_t ctr[4];  /* stands in for the two device counters */
    void *x = buf;
    uint32_t *w = (uint32_t *)(void *)buf;
    void *odd1 = (unsigned char *)(void *)buf + 1;
    void *odd2 = (unsigned char *)(void *)buf + 2;
    void *odd4 = (unsigned char *)(void *)buf + 4;
    uint32_t n = 777;
    dpattn_status st;
    int gpu;
    const uint32_t F32 = DPATTN_DTYPE_F32, F64 = DPATTN_DTYPE_F64;
    const uint32_t GAUSS = DPATTN_CUDA_SAMPLER_GAUSSIAN;

    memset(&key, 7, sizeof key);
    memset(buf, SENTINEL, sizeof buf);
    memset(ctr, SENTINEL, sizeof ctr);

    /* New status codes: appended after the existing ones, with their own descriptions. */
    CHECK(DPATTN_STATUS_CUDA_UNAVAILABLE == 17 && DPATTN_STATUS_CUDA_ERROR == 18);
    CHECK(strstr(dpattn_status_str(DPATTN_STATUS_CUDA_UNAVAILABLE), "CUDA unavailable") != NULL);
    CHECK(strstr(dpattn_status_str(DPATTN_STATUS_CUDA_ERROR), "CUDA error") != NULL);

    /* Probe: OK with a device count, or CUDA_UNAVAILABLE naming the reason. */
    CHECK(dpattn_cuda_probe(NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_devices"));
    st = dpattn_cuda_probe(&n);
    if (st == DPATTN_STATUS_OK) {
        gpu = 1;
        CHECK(n >= 1 && dpattn_last_error_message(NULL, 0) == 0);
    } else {
        gpu = 0;
        CHECK(st == DPATTN_STATUS_CUDA_UNAVAILABLE && says_why());
        CHECK(n == 777); /* written only on success */
    }

    /* dpattn_cuda_fill_noise: every argument error, before the device. */
    st = dpattn_cuda_fill_noise(-1, NULL, x, 4, F32, GAUSS, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("device"));
    st = dpattn_cuda_fill_noise(0, NULL, x, 4, F32, GAUSS, 1.0, 53, NULL, 1, 0);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("key"));
    st = dpattn_cuda_fill_noise(0, NULL, x, 4, 4, GAUSS, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("dtype"));
    st = dpattn_cuda_fill_noise(0, NULL, x, 4, F32, 4, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sampler"));
    st = dpattn_cuda_fill_noise(0, NULL, x, 4, F32, GAUSS, 1.0, 32, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("uniform_bits"));
    st = dpattn_cuda_fill_noise(0, NULL, x, 4, F32, GAUSS, 0.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("param") && msg_has("sigma"));
    st = dpattn_cuda_fill_noise(0, NULL, x, 4, F32, DPATTN_CUDA_SAMPLER_LAPLACE, NAN, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("param") && msg_has("scale"));
    st = dpattn_cuda_fill_noise(0, NULL, x, 4, F32, DPATTN_CUDA_SAMPLER_EXPONENTIAL, -2.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("param") && msg_has("rate"));
    st = dpattn_cuda_fill_noise(0, NULL, NULL, 4, F32, GAUSS, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out"));
    st = dpattn_cuda_fill_noise(0, NULL, NULL, 0, F32, GAUSS, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("len"));
    st = dpattn_cuda_fill_noise(0, NULL, x, 0, F32, GAUSS, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("len"));
    st = dpattn_cuda_fill_noise(0, NULL, odd2, 1, F32, GAUSS, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_MISALIGNED && msg_has("out"));
    st = dpattn_cuda_fill_noise(0, NULL, odd4, 1, F64, GAUSS, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_MISALIGNED && msg_has("out"));
    st = dpattn_cuda_fill_noise(0, NULL, odd1, 1, DPATTN_DTYPE_BF16, GAUSS, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_MISALIGNED && msg_has("out"));
    st = dpattn_cuda_fill_noise(0, NULL, x, SIZE_MAX / 4, F32, GAUSS, 1.0, 53, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_SIZE_OVERFLOW && msg_has("out"));
    st = dpattn_cuda_fill_noise(0, NULL, x, 4, F32, GAUSS, 1.0, 24, &key, 1, UINT64_MAX - 2);
    CHECK(st == DPATTN_STATUS_SIZE_OVERFLOW && msg_has("first"));

    /* dpattn_cuda_fill_stream_words. */
    st = dpattn_cuda_fill_stream_words(-1, NULL, w, 4, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("device"));
    st = dpattn_cuda_fill_stream_words(0, NULL, w, 4, NULL, 1, 0);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("key"));
    st = dpattn_cuda_fill_stream_words(0, NULL, NULL, 4, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out"));
    st = dpattn_cuda_fill_stream_words(0, NULL, w, 0, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("len"));
    st = dpattn_cuda_fill_stream_words(0, NULL, (uint32_t *)odd2, 1, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_MISALIGNED && msg_has("out"));
    st = dpattn_cuda_fill_stream_words(0, NULL, w, SIZE_MAX / 2, &key, 1, 0);
    CHECK(st == DPATTN_STATUS_SIZE_OVERFLOW && msg_has("out"));

    /* dpattn_cuda_clip_rows_add_gaussian: a 4 x 4 float matrix in 16 elements. */
    st = dpattn_cuda_clip_rows_add_gaussian(-1, NULL, x, 16, F32, 4, 4, 4, 1.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("device"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 4, 4, 1.0, 1.0, NULL, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("key"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, DPATTN_DTYPE_F16, 4, 4, 4, 1.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("dtype"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, NULL, 16, F32, 4, 4, 4, 1.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("`x`"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 4, 4, 1.0, 1.0, &key, 1, 0, NULL);
    CHECK(st == DPATTN_STATUS_NULL_ARGUMENT && msg_has("counters"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, odd4, 8, F64, 2, 4, 4, 1.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_MISALIGNED && msg_has("`x`"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 4, 4, 1.0, 1.0, &key, 1, 0,
                                            (uint32_t *)(void *)((unsigned char *)(void *)ctr + 2));
    CHECK(st == DPATTN_STATUS_MISALIGNED && msg_has("counters"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 4, 4, 0.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("clip_norm"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 4, 4, 1.0, -1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sigma"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 4, 4, 1.0, INFINITY, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sigma"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 0, 4, 4, 1.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("rows"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 0, 4, 1.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("dim"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 4, 3, 1.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("ld"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 15, F32, 4, 4, 4, 1.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_BUFFER_TOO_SHORT && msg_has("`x`"));
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, SIZE_MAX / 2, 4, 4, 1.0, 1.0, &key, 1, 0, ctr);
    CHECK(st == DPATTN_STATUS_SIZE_OVERFLOW);
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 4, 4, 1.0, 1.0, &key, 1, UINT64_MAX - 10, ctr);
    CHECK(st == DPATTN_STATUS_SIZE_OVERFLOW && msg_has("first"));
    /* The counters inside the rows the kernel touches. */
    st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 16, F32, 4, 4, 4, 1.0, 1.0, &key, 1, 0, w + 6);
    CHECK(st == DPATTN_STATUS_ALIASING && msg_has("counters"));

    if (!gpu) {
        /* Valid arguments without a GPU: CUDA_UNAVAILABLE with the reason, nothing written. */
        st = dpattn_cuda_fill_noise(0, NULL, x, 4, F32, GAUSS, 1.0, 53, &key, 1, 0);
        CHECK(st == DPATTN_STATUS_CUDA_UNAVAILABLE && says_why());
        st = dpattn_cuda_fill_noise(0, NULL, x, 4, DPATTN_DTYPE_BF16, DPATTN_CUDA_SAMPLER_UNIFORM, NAN, 24, &key, 1, 0);
        CHECK(st == DPATTN_STATUS_CUDA_UNAVAILABLE && says_why());
        st = dpattn_cuda_fill_stream_words(0, NULL, w, 16, &key, 1, 5);
        CHECK(st == DPATTN_STATUS_CUDA_UNAVAILABLE && says_why());
        st = dpattn_cuda_clip_rows_add_gaussian(0, NULL, x, 8, F64, 2, 3, 4, 1.0, 0.5, &key, 1, 0, ctr);
        CHECK(st == DPATTN_STATUS_CUDA_UNAVAILABLE && says_why());
    } else {
        /* A device ordinal past the last one: unavailable, before anything is queued. */
        st = dpattn_cuda_fill_noise((int32_t)n, NULL, x, 4, F32, GAUSS, 1.0, 53, &key, 1, 0);
        CHECK(st == DPATTN_STATUS_CUDA_UNAVAILABLE && msg_has("no CUDA device"));
    }

    /* The probe still answers as before; no failure above wrote anything. */
    CHECK(dpattn_cuda_probe(&n) == (gpu ? DPATTN_STATUS_OK : DPATTN_STATUS_CUDA_UNAVAILABLE));
    CHECK(untouched(buf, sizeof buf) && untouched(ctr, sizeof ctr));
    return 0;
}
