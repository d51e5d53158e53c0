// Tests include/dpattn.hpp (the header-only C++17 wrapper) from outside Rust: RAII handles
// free exactly once (the library's live-handle count proves it), moved-from handles are
// empty, Result<T> carries the status and message, exceptions carry both, and the wrapper
// computes the same bits as the plain C calls. Returns 0 or the failing line.
#include "dpattn.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#define REQUIRE(cond) \
    do {              \
        if (!(cond)) return __LINE__; \
    } while (0)

// Defined in hpp_double_include.cpp: the same inline functions from a second translation
// unit (an ODR clash or a non-inline definition in the header would fail to link).
int dpattn_hpp_second_unit(double* sigma_out);

static_assert(!std::is_copy_constructible<dpattn::Ledger>::value, "handles are move-only");
static_assert(std::is_nothrow_move_constructible<dpattn::DpTree>::value, "moves never throw");

static_assert(!std::is_copy_constructible<dpattn::Session>::value, "sessions are move-only");
static_assert(std::is_nothrow_move_constructible<dpattn::Session>::value, "moves never throw");

// One output-perturbation release of fixed inputs ([1, 2, 3, 4] queries, 6 keys) through
// the wrapper; the output's bytes.
static std::vector<float> op_release(dpattn::Session& session, dpattn_status* status) {
    const dpattn::Shape4 qs{1, 2, 3, 4}, ks{1, 2, 6, 4};
    std::vector<float> q(24), kv(48), out(24, 7.0f);
    for (size_t i = 0; i < q.size(); i++) q[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
    for (size_t i = 0; i < kv.size(); i++) kv[i] = 0.05f * static_cast<float>(i % 7) - 0.15f;
    dpattn_output_perturbation_params p{};
    dpattn_output_perturbation_params_default(&p);
    p.key_norm = 1.0;
    p.value_norm = 1.0;
    p.epsilon = 1.0;
    p.delta = 1e-6;
    std::vector<double> sigma;
    std::vector<float> scratch;
    *status = dpattn::try_output_perturbation_attention(
        dpattn::tensor_mut(out, qs), dpattn::tensor(q, qs), dpattn::tensor(kv, ks),
        dpattn::tensor(kv, ks), p, session, sigma, scratch);
    return out;
}

// Sessions: RAII, position, save and restore (a new epoch: the same stream id draws new
// noise), replay bit for bit, the unit of the ledger, and the release wrappers.
static int sessions(size_t live0) {
    dpattn_status st = DPATTN_STATUS_INTERNAL;
    {
        dpattn::Ledger ledger = dpattn::Ledger::approx(dpattn::units::token, 10.0, 1e-4);
        dpattn::Session session(ledger);
        REQUIRE(dpattn_live_handle_count() == live0 + 2);
        const dpattn::Position p0 = session.position();
        REQUIRE(p0.next_stream == 0);
        const std::vector<uint8_t> older = session.save();
        REQUIRE(older.size() == dpattn_session_state_len());
        const std::vector<float> first = op_release(session, &st);
        REQUIRE(st == DPATTN_STATUS_OK);
        REQUIRE(session.position().next_stream == 1 && session.position().epoch == p0.epoch);
        REQUIRE(ledger.charges() == 1);  // the session charged the caller's ledger
        const std::vector<float> second = op_release(session, &st);
        REQUIRE(st == DPATTN_STATUS_OK && second != first);  // a fresh stream id
        // Replay for audit: the master key and the logged position reproduce the first
        // release bit for bit, and charge nothing.
        dpattn::Session replay = dpattn::Session::for_replay(session.master_key(), p0.epoch, 0);
        REQUIRE(op_release(replay, &st) == first && st == DPATTN_STATUS_OK);
        REQUIRE(ledger.charges() == 2);
        // Restoring the older save: a fresh epoch, stream id 0 again, other noise; its ledger
        // forgot the charges made after the save.
        dpattn::Session::Restored restored = dpattn::Session::restore(older);
        const dpattn::Position p1 = restored.session.position();
        REQUIRE(p1.next_stream == 0 && p1.epoch != p0.epoch);
        REQUIRE(restored.ledger.charges() == 0);
        REQUIRE(dpattn::same_unit(restored.ledger.unit(), dpattn::units::token));
        const std::vector<float> again = op_release(restored.session, &st);
        REQUIRE(st == DPATTN_STATUS_OK && again != first);
        REQUIRE(restored.ledger.charges() == 1 && ledger.charges() == 2);
        REQUIRE(dpattn_live_handle_count() == live0 + 5);
        // try_ forms: bytes that are not a saved state; a replay session cannot be saved.
        dpattn::Result<dpattn::Session::Restored> bad = dpattn::Session::try_restore(std::vector<uint8_t>(older.size(), 0));
        REQUIRE(!bad.ok() && bad.status() == DPATTN_STATUS_OUT_OF_RANGE && !bad.message().empty());
        REQUIRE(!replay.try_save().ok() && replay.try_save().status() == DPATTN_STATUS_UNSUPPORTED);
        // A session over a ledger for another unit: the release is refused, nothing written.
        dpattn::Ledger prompts = dpattn::Ledger::approx(dpattn::units::prompt, 10.0, 1e-4);
        dpattn::Session wrong(prompts);
        const std::vector<float> refused = op_release(wrong, &st);
        REQUIRE(st == DPATTN_STATUS_UNIT_MISMATCH);
        REQUIRE(refused == std::vector<float>(24, 7.0f) && prompts.charges() == 0);
        // A moved-from session is empty; the ledger may go first (the session keeps it).
        dpattn::Session moved = std::move(session);
        REQUIRE(!session.get() && moved.get());
        dpattn::Session keeps = [&] {
            dpattn::Ledger temporary = dpattn::Ledger::approx(dpattn::units::token, 10.0, 1e-4);
            return dpattn::Session(temporary);
        }();
        REQUIRE(op_release(keeps, &st).size() == 24 && st == DPATTN_STATUS_OK);
    }
    REQUIRE(dpattn_live_handle_count() == live0);
    {
        // DP-Forward through the wrapper equals the C call at the same session position.
        dpattn::Ledger sequences = dpattn::Ledger::zcdp(dpattn::units::sequence, 10.0);
        dpattn_dp_forward_params p{};
        dpattn_dp_forward_params_default(&p);
        p.epsilon = 4.0;
        p.tokens = 4;
        p.dim = 8;
        const dpattn_dp_forward_factors iid = {DPATTN_DP_FORWARD_FACTORS_IID, nullptr, 0, nullptr, 0};
        std::vector<double> x(2 * 4 * 8), y, scratch;
        for (size_t i = 0; i < x.size(); i++) x[i] = static_cast<double>(i % 7) - 3.0;
        y = x;
        const dpattn_key key = dpattn::key_from_bytes({1, 2, 3});
        dpattn::Session a = dpattn::Session::for_replay(key, 11, 0, &sequences);
        const dpattn_dp_forward_clip_report rep = dpattn::dp_forward(x, p, iid, a, scratch);
        REQUIRE(rep.scaled == 2 && sequences.charges() == 1);
        dpattn::Session b = dpattn::Session::for_replay(key, 11, 0);
        dpattn_dp_forward_clip_report rep2{};
        REQUIRE(dpattn_dp_forward(y.data(), y.size(), DPATTN_DTYPE_F64, 8, 8, 8, &p, &iid, b.get(),
                                  nullptr, 0, &rep2) == DPATTN_STATUS_OK);
        REQUIRE(std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
        REQUIRE(rep2.scaled == rep.scaled);
        // Paper 000 in its default exact mode has no floating-point-safe form: the Result
        // carries the refusal.
        dpattn::Ledger columns = dpattn::Ledger::approx(dpattn::units::feature_column, 1.0, 1e-5);
        dpattn::Session c(columns);
        dpattn_gaussian_sampling_params gp{};
        dpattn_gaussian_sampling_params_default(&gp);
        gp.epsilon = 0.09;
        gp.delta = 1e-6;
        gp.k = 1000;
        gp.domain.alpha = 1.0;
        gp.domain.eta = 0.01;
        gp.domain.beta = 1e-6;
        std::vector<double> xs(4 * 8, 0.25), ob(16), op(16), gs;
        const dpattn::Shape4 xshape{1, 1, 4, 8}, oshape{1, 1, 4, 4};
        dpattn::Result<dpattn_gaussian_sampling_report> g = dpattn::try_gaussian_sampling_attention(
            dpattn::tensor_mut(ob, oshape), dpattn::tensor_mut(op, oshape), dpattn::tensor(xs, xshape), gp, c, gs);
        REQUIRE(!g.ok() && g.status() == DPATTN_STATUS_UNSUPPORTED);
        REQUIRE(g.message().find("floating-point-safe") != std::string::npos && !gs.empty());
        REQUIRE(columns.charges() == 0);
    }
    return 0;
}

extern "C" int dpattn_cpp_hpp_wrapper(void) {
    const size_t live0 = dpattn_live_handle_count();

    // Result<T>: value on success, status + message on failure.
    dpattn::Result<double> ok = dpattn::try_analytic_gaussian_sigma(1.0, 1e-5, 1.0);
    REQUIRE(ok.ok() && ok.status() == DPATTN_STATUS_OK && ok.message().empty());
    double direct = 0.0;
    REQUIRE(dpattn_analytic_gaussian_sigma(1.0, 1e-5, 1.0, &direct) == DPATTN_STATUS_OK);
    REQUIRE(ok.value() == direct);
    double second = 0.0;
    REQUIRE(dpattn_hpp_second_unit(&second) == 0 && second == direct);
    dpattn::Result<double> bad = dpattn::try_analytic_gaussian_sigma(-1.0, 1e-5, 1.0);
    REQUIRE(!bad.ok() && bad.status() == DPATTN_STATUS_OUT_OF_RANGE);
    REQUIRE(bad.message().find("epsilon") != std::string::npos);

    // Exceptions carry the status and the library's message.
    try {
        dpattn::Ledger::approx(dpattn::units::token, 1.0, 1.5);
        return __LINE__;
    } catch (const dpattn::Error& e) {
        REQUIRE(e.status() == DPATTN_STATUS_OUT_OF_RANGE);
        REQUIRE(std::string(e.what()).find("delta") != std::string::npos);
    }

    // RAII: one handle per ledger while alive, none after scope exit; moves transfer.
    {
        dpattn::Ledger a = dpattn::Ledger::approx(dpattn::units::token, 1.0, 1e-6);
        REQUIRE(dpattn_live_handle_count() == live0 + 1);
        a.charge_approx(dpattn::units::token, 0.25, 0.0);
        dpattn::Ledger b = std::move(a);
        REQUIRE(dpattn_live_handle_count() == live0 + 1);
        REQUIRE(b.charges() == 1);
        dpattn_amount spent = b.spent();
        REQUIRE(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == 0.25 && spent.delta == 0.0);
        REQUIRE(b.try_charge_approx(dpattn::units::token, 0.8, 0.0) == DPATTN_STATUS_INFEASIBLE);
        REQUIRE(b.charges() == 1);  // a refused charge changes nothing
        // A charge for another unit is refused (whether or not it would fit), nothing changes.
        REQUIRE(b.try_charge_approx(dpattn::units::prompt, 0.1, 0.0) == DPATTN_STATUS_UNIT_MISMATCH);
        try {
            b.charge_zcdp(dpattn::units::sequence, 0.1);
            return __LINE__;
        } catch (const dpattn::Error& e) {
            REQUIRE(e.status() == DPATTN_STATUS_UNIT_MISMATCH);
            REQUIRE(std::string(e.what()).find("one token") != std::string::npos);
        }
        // Any 4 tokens cover one token.
        b.charge_approx(dpattn::units::tokens(4), 0.25, 0.0);
        REQUIRE(b.charges() == 2 && b.spent().epsilon == 0.5);
        REQUIRE(dpattn::same_unit(b.unit(), dpattn::units::token));
        REQUIRE(b.total().epsilon == 1.0);
        dpattn::Ledger z = dpattn::Ledger::zcdp(dpattn::units::prompt, 1.0);
        dpattn::Ledger r = dpattn::Ledger::rdp(dpattn::units::record, 1.0, 1e-6);
        REQUIRE(dpattn::same_unit(r.unit(), dpattn::units::record));
        REQUIRE(z.remaining().kind == DPATTN_AMOUNT_ZCDP && z.remaining().rho == 1.0);
        REQUIRE(r.spent().kind == DPATTN_AMOUNT_RDP);
        REQUIRE(dpattn_live_handle_count() == live0 + 3);
    }
    REQUIRE(dpattn_live_handle_count() == live0);

    // Generic handles through make<H>(ctor, args...); release() gives up ownership.
    {
        const double values[5] = {0.1, 0.2, 0.3, 0.4, 0.5};
        dpattn::DpTree tree = dpattn::make<dpattn::DpTree>(dpattn_dp_tree_new_exact, values, size_t{5});
        REQUIRE(tree && dpattn_live_handle_count() == live0 + 1);
        double left = -1.0, right = -1.0;
        dpattn::check(dpattn_dp_tree_query_leaf(tree.get(), 2, &left, &right));
        // Exact tree: sums strictly left (0.1 + 0.2) and right (0.4 + 0.5) of leaf 2.
        REQUIRE(std::fabs(left - 0.3) < 1e-15 && std::fabs(right - 0.9) < 1e-15);
        dpattn::DpTree moved(std::move(tree));
        REQUIRE(!tree && moved);
        dpattn_dp_tree* raw = moved.release();
        REQUIRE(!moved && dpattn_live_handle_count() == live0 + 1);
        dpattn_dp_tree_free(raw);
        dpattn::Result<dpattn::DpTree> none =
            dpattn::try_make<dpattn::DpTree>(dpattn_dp_tree_new_exact, values, size_t{0});
        REQUIRE(!none.ok() && none.status() != DPATTN_STATUS_OK && !none.message().empty());
    }
    REQUIRE(dpattn_live_handle_count() == live0);

    // Tensors and attention: the wrapper computes the same bits as the C call, including
    // a strided [batch, seq, heads, dim] input.
    const dpattn::Shape4 shape{2, 3, 5, 8};
    const size_t n = 2 * 3 * 5 * 8;
    std::vector<float> q(n), k(n), v(n), via_hpp(n), via_c(n);
    const dpattn_key key = dpattn::key_from_bytes({9, 8, 7, 6, 5, 4, 3, 2, 1});
    dpattn::fill_gaussian(key, 10, 0, 1.0, q);
    dpattn::fill_gaussian(key, 11, 0, 1.0, k);
    dpattn::fill_gaussian(key, 12, 0, 1.0, v);
    std::vector<float> k_bshd(n);  // k stored as [batch, seq, heads, dim]
    for (size_t b = 0; b < 2; b++)
        for (size_t h = 0; h < 3; h++)
            for (size_t s = 0; s < 5; s++)
                for (size_t d = 0; d < 8; d++)
                    k_bshd[((b * 5 + s) * 3 + h) * 8 + d] = k[((b * 3 + h) * 5 + s) * 8 + d];
    dpattn_tensor4 k_strided = dpattn::tensor(k_bshd.data(), n, shape, dpattn::Shape4{120, 8, 24, 1});
    std::vector<float> scratch;
    dpattn_attention_options opts = dpattn::attention_options();
    dpattn::check(dpattn::attention(dpattn::tensor_mut(via_hpp, shape), dpattn::tensor(q, shape), k_strided,
                                    dpattn::tensor(v, shape), opts, scratch));
    REQUIRE(!scratch.empty());
    dpattn_tensor4 tq = dpattn::tensor(q, shape), tk = dpattn::tensor(k, shape), tv = dpattn::tensor(v, shape);
    dpattn_tensor4_mut to = dpattn::tensor_mut(via_c, shape);
    size_t len = 0;
    REQUIRE(dpattn_attention_scratch_len(8, 8, &len) == DPATTN_STATUS_OK && len == scratch.size());
    REQUIRE(dpattn_attention(&to, &tq, &tk, &tv, nullptr, scratch.data(), scratch.size()) == DPATTN_STATUS_OK);
    REQUIRE(std::memcmp(via_hpp.data(), via_c.data(), n * sizeof(float)) == 0);

    // Errors from the helpers: a dim mismatch between q and k.
    dpattn_tensor4 k_bad = dpattn::tensor(k.data(), n, dpattn::Shape4{2, 3, 10, 4});
    REQUIRE(dpattn::attention(dpattn::tensor_mut(via_hpp, shape), tq, k_bad, tv, opts, scratch) ==
            DPATTN_STATUS_SHAPE_MISMATCH);
    REQUIRE(dpattn::last_error().find("k") != std::string::npos);
    REQUIRE(dpattn_live_handle_count() == live0);
    if (int line = sessions(live0)) return line;
    REQUIRE(dpattn_live_handle_count() == live0);
    return 0;
}
