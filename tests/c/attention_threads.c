/* dpattn_attention with options.threads: bit for bit the single-threaded result (several
 * thread counts, a head of 300 query rows, so 4 tiles of 96 rows), grouped-query shapes
 * (2 key/value heads for 4 query heads), the scratch it needs (threads parts), and the
 * calls that refuse threads > 1. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { B = 1, H = 4, HKV = 2, SQ = 300, SK = 40, D = 16 };

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static dpattn_tensor4 in(const float *data, size_t h, size_t s) {
    dpattn_tensor4 t = {data, B * h * s * D, DPATTN_DTYPE_F32, {B, h, s, D},
                        {h * s * D, s * D, D, 1}};
    return t;
}

int dpattn_c_attention_threads(void) {
    static float q[B * H * SQ * D], k[B * HKV * SK * D], v[B * HKV * SK * D];
    static float one[B * H * SQ * D], many[B * H * SQ * D];
    dpattn_attention_options opt;
    size_t n = 0, i;
    uint32_t seed = 7, t;
    float *scratch;
    dpattn_tensor4 tq = in(q, H, SQ), tk = in(k, HKV, SK), tv = in(v, HKV, SK);
    dpattn_tensor4_mut to = {one, B * H * SQ * D, DPATTN_DTYPE_F32, {B, H, SQ, D},
                             {H * SQ * D, SQ * D, D, 1}};

    for (i = 0; i < B * H * SQ * D; i++) q[i] = frand(&seed);
    for (i = 0; i < B * HKV * SK * D; i++) k[i] = frand(&seed);
    for (i = 0; i < B * HKV * SK * D; i++) v[i] = frand(&seed);
    CHECK(dpattn_attention_scratch_len(D, D, &n) == DPATTN_STATUS_OK);
    scratch = malloc(4 * n * sizeof *scratch);
    CHECK(scratch != NULL);

    CHECK(dpattn_attention_options_default(&opt) == DPATTN_STATUS_OK);
    CHECK(opt.threads == 1);
    opt.causal = 1;
    CHECK(dpattn_attention(&to, &tq, &tk, &tv, &opt, scratch, n) == DPATTN_STATUS_OK);
    for (t = 0; t <= 4; t++) {
        memset(many, 0, sizeof many);
        to.data = many;
        opt.threads = t; /* 0 means the calling thread only, like 1 */
        CHECK(dpattn_attention(&to, &tq, &tk, &tv, &opt, scratch, (t ? t : 1) * n) ==
              DPATTN_STATUS_OK);
        CHECK(memcmp(one, many, sizeof one) == 0);
        to.data = one;
    }
    /* t threads need t scratch parts; nothing is written on error. */
    opt.threads = 3;
    memset(many, 0, sizeof many);
    to.data = many;
    CHECK(dpattn_attention(&to, &tq, &tk, &tv, &opt, scratch, 2 * n) ==
          DPATTN_STATUS_SCRATCH_TOO_SMALL);
    for (i = 0; i < B * H * SQ * D; i++) CHECK(many[i] == 0.0f);
    /* Only dpattn_attention starts threads. */
    CHECK(dpattn_attention_heads(&to, &tq, &tk, &tv, &opt, 0, scratch, 4 * n) ==
          DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("options.threads"));
    free(scratch);
    return 0;
}
