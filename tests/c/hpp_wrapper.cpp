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
        dpattn::Ledger::approx(1.0, 1.5);
        return __LINE__;
    } catch (const dpattn::Error& e) {
        REQUIRE(e.status() == DPATTN_STATUS_OUT_OF_RANGE);
        REQUIRE(std::string(e.what()).find("delta") != std::string::npos);
    }

    // RAII: one handle per ledger while alive, none after scope exit; moves transfer.
    {
        dpattn::Ledger a = dpattn::Ledger::approx(1.0, 1e-6);
        REQUIRE(dpattn_live_handle_count() == live0 + 1);
        a.charge_approx(0.25, 0.0);
        dpattn::Ledger b = std::move(a);
        REQUIRE(dpattn_live_handle_count() == live0 + 1);
        REQUIRE(b.charges() == 1);
        dpattn_amount spent = b.spent();
        REQUIRE(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == 0.25 && spent.delta == 0.0);
        REQUIRE(b.try_charge_approx(0.8, 0.0) == DPATTN_STATUS_INFEASIBLE);
        REQUIRE(b.charges() == 1);  // a refused charge changes nothing
        dpattn::Ledger z = dpattn::Ledger::zcdp(1.0);
        dpattn::Ledger r = dpattn::Ledger::rdp(1.0, 1e-6);
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
    return 0;
}
