/*
 * The budget ledger handle from C99: the three kinds, refusals that leave the ledger
 * unchanged, the amounts per kind, and the handle rules (use after free is detected,
 * double free is a no-op). Expected values are closed forms computed here.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const dpattn_privacy_unit TOKEN = {DPATTN_UNIT_TOKENS, 1};
static const dpattn_privacy_unit PROMPT = {DPATTN_UNIT_PROMPT, 0};
static const dpattn_privacy_unit RECORD = {DPATTN_UNIT_RECORD, 0};

/* Snapshot of everything a ledger reports. */
typedef struct {
    dpattn_amount spent, remaining, total;
    uint64_t charges;
} snapshot;

static int snap(const dpattn_ledger *l, snapshot *s) {
    memset(s, 0, sizeof *s);
    if (dpattn_ledger_spent(l, &s->spent) != DPATTN_STATUS_OK) return 1;
    if (dpattn_ledger_remaining(l, &s->remaining) != DPATTN_STATUS_OK) return 1;
    if (dpattn_ledger_total(l, &s->total) != DPATTN_STATUS_OK) return 1;
    return dpattn_ledger_charges(l, &s->charges) != DPATTN_STATUS_OK;
}

/* Bitwise equality of each field (NaN fields included). Field by field: the padding after
 * `kind` is written by the library with unspecified bytes, so memcmp of the whole struct
 * would compare garbage (and valgrind reports it). */
static int same_amount(const dpattn_amount *a, const dpattn_amount *b) {
    return a->kind == b->kind && memcmp(&a->epsilon, &b->epsilon, sizeof a->epsilon) == 0 &&
           memcmp(&a->delta, &b->delta, sizeof a->delta) == 0 &&
           memcmp(&a->rho, &b->rho, sizeof a->rho) == 0;
}
static int same(const snapshot *a, const snapshot *b) {
    return same_amount(&a->spent, &b->spent) && same_amount(&a->remaining, &b->remaining) &&
           same_amount(&a->total, &b->total) && a->charges == b->charges;
}

static int test_approx(void) {
    dpattn_ledger *l = NULL;
    snapshot before, after;
    int i;
    CHECK(dpattn_ledger_new_approx(TOKEN, 1.0, 1e-6, &l) == DPATTN_STATUS_OK && l != NULL);
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.5, 5e-7) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.25, 0.0) == DPATTN_STATUS_OK); /* a pure charge */
    CHECK(snap(l, &before) == 0);
    CHECK(before.spent.kind == DPATTN_AMOUNT_APPROX && before.spent.epsilon == 0.75);
    CHECK(before.spent.delta == 5e-7 && isnan(before.spent.rho));
    CHECK(before.remaining.epsilon == 0.25 && before.remaining.delta <= 5e-7);
    CHECK(fabs(before.remaining.delta - 5e-7) < 1e-21);
    CHECK(before.total.epsilon == 1.0 && before.total.delta == 1e-6 && before.charges == 2);
    /* Refusals: over budget in ε, over budget in δ, kinds an approximate ledger cannot
       take, invalid parameters. Each leaves the ledger bit for bit as it was. */
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.5, 0.0) == DPATTN_STATUS_INFEASIBLE);
    CHECK(msg_has("spent epsilon + charge epsilon <= total epsilon"));
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.1, 6e-7) == DPATTN_STATUS_INFEASIBLE && msg_has("delta"));
    CHECK(dpattn_ledger_charge_zcdp(l, TOKEN, 0.01) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("charge"));
    CHECK(dpattn_ledger_charge_sampled_gaussian(l, TOKEN, 0.01, 1.0, 10) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, NAN, 0.0) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.1, 1.5) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(snap(l, &after) == 0 && same(&before, &after));
    /* Filling the budget exactly is allowed; then nothing more fits. */
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.25, 5e-7) == DPATTN_STATUS_OK);
    CHECK(snap(l, &after) == 0 && after.remaining.epsilon == 0.0 && after.charges == 3);
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 1e-300, 0.0) == DPATTN_STATUS_INFEASIBLE);
    dpattn_ledger_free(l);
    /* Ten charges of 0.1 exceed 1: the double nearest 0.1 is 0.1000000000000000055..., so
       the exact sum of ten is above 1 and the tenth is refused (the safe answer). */
    CHECK(dpattn_ledger_new_approx(TOKEN, 1.0, 0.0, &l) == DPATTN_STATUS_OK);
    for (i = 0; i < 9; i++) CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.1, 0.0) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.1, 0.0) == DPATTN_STATUS_INFEASIBLE);
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.09375, 0.0) == DPATTN_STATUS_OK);
    dpattn_ledger_free(l);
    return 0;
}

static int test_zcdp(void) {
    dpattn_ledger *l = NULL;
    snapshot before, after;
    CHECK(dpattn_ledger_new_zcdp(PROMPT, 0.5, &l) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charge_zcdp(l, PROMPT, 0.125) == DPATTN_STATUS_OK);
    /* A pure 0.5-DP charge enters as ρ = ε²/2 = 0.125 (Bun–Steinke Prop 1.4). */
    CHECK(dpattn_ledger_charge_approx(l, PROMPT, 0.5, 0.0) == DPATTN_STATUS_OK);
    CHECK(snap(l, &before) == 0);
    CHECK(before.spent.kind == DPATTN_AMOUNT_ZCDP && before.spent.rho == 0.25);
    CHECK(isnan(before.spent.epsilon) && isnan(before.spent.delta));
    CHECK(before.remaining.rho == 0.25 && before.total.rho == 0.5 && before.charges == 2);
    CHECK(dpattn_ledger_charge_zcdp(l, PROMPT, 0.3) == DPATTN_STATUS_INFEASIBLE && msg_has("spent rho"));
    /* δ > 0 has unbounded loss with probability δ: no zCDP bound, refused. */
    CHECK(dpattn_ledger_charge_approx(l, PROMPT, 0.1, 1e-9) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("charge delta"));
    CHECK(dpattn_ledger_charge_zcdp(l, PROMPT, -1.0) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("rho"));
    CHECK(dpattn_ledger_charge_sampled_gaussian(l, PROMPT, 0.01, 1.0, 1) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(snap(l, &after) == 0 && same(&before, &after));
    dpattn_ledger_free(l);
    return 0;
}

/* RDP → (ε, δ) at one order (Balle et al. 2020 Thm 21): r + ln((α−1)/α) − (ln δ + ln α)/(α−1). */
static double conv(double alpha, double r, double delta) {
    return r + log1p(-1 / alpha) - (log(delta) + log(alpha)) / (alpha - 1);
}

static int test_rdp(void) {
    dpattn_ledger *l = NULL;
    snapshot before, after;
    double orders[DPATTN_RDP_DEFAULT_ORDER_COUNT], curve[DPATTN_RDP_DEFAULT_ORDER_COUNT];
    double best = INFINITY, eps, order;
    int i;
    CHECK(dpattn_rdp_default_orders(orders, DPATTN_RDP_DEFAULT_ORDER_COUNT) == DPATTN_STATUS_OK);
    /* A ρ = 0.5 zCDP charge is the curve ε(α) = αρ; spent ε = min over the default orders of
       the conversion (best order 5.4: 4.72851, per the core docs). */
    CHECK(dpattn_ledger_new_rdp(RECORD, 10.0, 1e-5, &l) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charge_zcdp(l, RECORD, 0.5) == DPATTN_STATUS_OK);
    for (i = 0; i < DPATTN_RDP_DEFAULT_ORDER_COUNT; i++) {
        double v = conv(orders[i], 0.5 * orders[i], 1e-5);
        if (v < best) best = v;
    }
    CHECK(snap(l, &before) == 0);
    CHECK(before.spent.kind == DPATTN_AMOUNT_RDP && before.spent.delta == 1e-5 && isnan(before.spent.rho));
    CHECK(before.spent.epsilon >= best && before.spent.epsilon - best < 1e-12 && fabs(best - 4.72851) < 1e-5);
    CHECK(before.total.epsilon == 10.0 && before.remaining.epsilon <= 10.0 - before.spent.epsilon);
    /* δ > 0 cannot go into an RDP ledger. */
    CHECK(dpattn_ledger_charge_approx(l, RECORD, 0.1, 1e-9) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(snap(l, &after) == 0 && same(&before, &after));
    dpattn_ledger_free(l);

    /* DP-SGD: 2250 steps at q = 0.04, z = 1.5 under a target (8, 1e-5): accepted, spent ε is
       the accountant's (at most Opacus' 7.32911117143, the default orders being a superset
       of Opacus'); another 2250 steps would exceed 8: refused, ledger unchanged. */
    CHECK(dpattn_ledger_new_rdp(RECORD, 8.0, 1e-5, &l) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charge_sampled_gaussian(l, RECORD, 0.04, 1.5, 2250) == DPATTN_STATUS_OK);
    CHECK(dpattn_rdp_sampled_gaussian_epsilon(0.04, 1.5, 2250, NULL, 0, 1e-5, &eps, &order) == DPATTN_STATUS_OK);
    CHECK(snap(l, &before) == 0 && before.charges == 1);
    CHECK(fabs(before.spent.epsilon / eps - 1) < 1e-12 && before.spent.epsilon <= 7.32911117143 + 1e-9);
    CHECK(dpattn_ledger_charge_sampled_gaussian(l, RECORD, 0.04, 1.5, 2250) == DPATTN_STATUS_INFEASIBLE);
    CHECK(msg_has("RDP curve"));
    CHECK(dpattn_ledger_charge_sampled_gaussian(l, RECORD, 1.5, 1.5, 1) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("sampling_rate"));
    CHECK(snap(l, &after) == 0 && same(&before, &after));
    dpattn_ledger_free(l);

    /* An explicit curve: the Gaussian α/(2z²) with z = 10, on the default orders. */
    for (i = 0; i < DPATTN_RDP_DEFAULT_ORDER_COUNT; i++) curve[i] = orders[i] / 200.0;
    CHECK(dpattn_rdp_epsilon(orders, curve, DPATTN_RDP_DEFAULT_ORDER_COUNT, 1e-5, &eps, &order) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_new_rdp(RECORD, 1.0, 1e-5, &l) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charge_rdp(l, RECORD, curve, DPATTN_RDP_DEFAULT_ORDER_COUNT) == DPATTN_STATUS_OK);
    CHECK(snap(l, &before) == 0 && fabs(before.spent.epsilon / eps - 1) < 1e-12);
    CHECK(dpattn_ledger_charge_rdp(l, RECORD, curve, 10) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("rdp"));
    CHECK(dpattn_ledger_charge_rdp(l, RECORD, NULL, DPATTN_RDP_DEFAULT_ORDER_COUNT) == DPATTN_STATUS_NULL_ARGUMENT);
    curve[3] = -1.0;
    CHECK(dpattn_ledger_charge_rdp(l, RECORD, curve, DPATTN_RDP_DEFAULT_ORDER_COUNT) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(snap(l, &after) == 0 && same(&before, &after));
    dpattn_ledger_free(l);
    return 0;
}

static int test_handles(void) {
    dpattn_ledger *l = (dpattn_ledger *)(uintptr_t)0x1230, *keep;
    dpattn_amount a;
    uint64_t n = 99;
    /* Constructor errors leave the out-parameter untouched. */
    keep = l;
    CHECK(dpattn_ledger_new_approx(TOKEN, 1.0, 1.0, &l) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta") && l == keep);
    CHECK(dpattn_ledger_new_approx(TOKEN, 0.0, 0.0, &l) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon") && l == keep);
    CHECK(dpattn_ledger_new_zcdp(TOKEN, NAN, &l) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("rho") && l == keep);
    CHECK(dpattn_ledger_new_rdp(TOKEN, 1.0, 0.0, &l) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta") && l == keep);
    CHECK(dpattn_ledger_new_zcdp(TOKEN, 1.0, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_ledger"));
    /* NULL and made-up handles. */
    CHECK(dpattn_ledger_charges(NULL, &n) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("ledger"));
    CHECK(dpattn_ledger_charges(l, &n) == DPATTN_STATUS_INVALID_HANDLE && n == 99);
    /* Use after free is detected; double free and free(NULL) are no-ops. */
    CHECK(dpattn_ledger_new_zcdp(TOKEN, 1.0, &l) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charges(l, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_count"));
    CHECK(dpattn_ledger_spent(l, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_spent"));
    dpattn_ledger_free(l);
    CHECK(dpattn_ledger_charge_zcdp(l, TOKEN, 0.1) == DPATTN_STATUS_INVALID_HANDLE && msg_has("ledger"));
    a.kind = 7;
    CHECK(dpattn_ledger_remaining(l, &a) == DPATTN_STATUS_INVALID_HANDLE && a.kind == 7);
    CHECK(dpattn_ledger_total(l, &a) == DPATTN_STATUS_INVALID_HANDLE);
    dpattn_ledger_free(l);
    dpattn_ledger_free(NULL);
    return 0;
}

/* A ledger is kept for one privacy unit: a charge for another unit is refused with
 * DPATTN_STATUS_UNIT_MISMATCH and changes nothing, whether or not it would fit; a guarantee
 * for up to c tokens covers a ledger for fewer; malformed units are argument errors. */
static int test_units(void) {
    const dpattn_privacy_unit four = {DPATTN_UNIT_TOKENS, 4};
    const dpattn_privacy_unit others[] = {{DPATTN_UNIT_FEATURE_COLUMN, 0}, {DPATTN_UNIT_SEQUENCE, 0},
                                          {DPATTN_UNIT_PROMPT, 0}, {DPATTN_UNIT_RECORD, 0}};
    const dpattn_privacy_unit bad_kind = {9, 0}, no_tokens = {DPATTN_UNIT_TOKENS, 0},
                              stray_tokens = {DPATTN_UNIT_SEQUENCE, 2};
    dpattn_ledger *l = NULL, *g = NULL, *kept = (dpattn_ledger *)(uintptr_t)0x1230;
    dpattn_privacy_unit u = {77, 77};
    snapshot before, after;
    size_t i;
    CHECK(dpattn_ledger_new_approx(TOKEN, 1.0, 1e-6, &l) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charge_approx(l, TOKEN, 0.25, 0.0) == DPATTN_STATUS_OK);
    CHECK(snap(l, &before) == 0);
    for (i = 0; i < sizeof others / sizeof others[0]; i++) {
        CHECK(dpattn_ledger_charge_approx(l, others[i], 0.1, 0.0) == DPATTN_STATUS_UNIT_MISMATCH);
        CHECK(msg_has("unit mismatch") && msg_has("one token"));
        CHECK(dpattn_ledger_charge_approx(l, others[i], 5.0, 0.0) == DPATTN_STATUS_UNIT_MISMATCH);
        CHECK(dpattn_ledger_charge_zcdp(l, others[i], 0.01) == DPATTN_STATUS_UNIT_MISMATCH);
        CHECK(snap(l, &after) == 0 && same(&before, &after));
    }
    CHECK(strcmp(dpattn_status_str(DPATTN_STATUS_UNIT_MISMATCH), "unknown status code") != 0);
    /* Any 4 tokens cover one token: accepted (spent 0.25 + 0.25). */
    CHECK(dpattn_ledger_charge_approx(l, four, 0.25, 0.0) == DPATTN_STATUS_OK);
    CHECK(snap(l, &after) == 0 && after.spent.epsilon == 0.5 && after.charges == 2);
    /* One token does not cover groups of 4. */
    CHECK(dpattn_ledger_new_zcdp(four, 1.0, &g) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charge_zcdp(g, TOKEN, 0.01) == DPATTN_STATUS_UNIT_MISMATCH);
    CHECK(snap(g, &after) == 0 && after.spent.rho == 0.0 && after.charges == 0);
    /* Malformed units in charges and constructors: argument errors, nothing changes. */
    CHECK(snap(l, &before) == 0);
    CHECK(dpattn_ledger_charge_approx(l, bad_kind, 0.1, 0.0) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("unit.kind"));
    CHECK(dpattn_ledger_charge_approx(l, no_tokens, 0.1, 0.0) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_ledger_charge_approx(l, stray_tokens, 0.1, 0.0) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("unit.tokens"));
    CHECK(snap(l, &after) == 0 && same(&before, &after));
    CHECK(dpattn_ledger_new_approx(bad_kind, 1.0, 0.0, &kept) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_ledger_new_zcdp(no_tokens, 1.0, &kept) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_ledger_new_rdp(stray_tokens, 1.0, 1e-5, &kept) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(kept == (dpattn_ledger *)(uintptr_t)0x1230);
    /* The unit reads back as created. */
    CHECK(dpattn_ledger_unit(l, &u) == DPATTN_STATUS_OK && u.kind == DPATTN_UNIT_TOKENS && u.tokens == 1);
    CHECK(dpattn_ledger_unit(g, &u) == DPATTN_STATUS_OK && u.kind == DPATTN_UNIT_TOKENS && u.tokens == 4);
    CHECK(dpattn_ledger_unit(g, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_unit"));
    dpattn_ledger_free(l);
    dpattn_ledger_free(g);
    u.kind = 77;
    CHECK(dpattn_ledger_unit(l, &u) == DPATTN_STATUS_INVALID_HANDLE && u.kind == 77);
    return 0;
}

int dpattn_c_ledger(void) {
    int line;
    if ((line = test_approx()) != 0) return line;
    if ((line = test_zcdp()) != 0) return line;
    if ((line = test_rdp()) != 0) return line;
    if ((line = test_handles()) != 0) return line;
    if ((line = test_units()) != 0) return line;
    return 0;
}
